# owned by its area; see the top Makefile
