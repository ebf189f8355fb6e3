/* tests/compile_stbds.c - the program's own copy of stb_ds's implementation (compile matrix).
   Linked with compile_impl.c built with -DHOOKS_NO_STB_DS_IMPL, which must then not emit it again
   (and must still build warning-free). */
#define STB_DS_IMPLEMENTATION
#include <stb/stb_ds.h>
