# tests/docs.mk - the docs' generated sections: parameter tables from train.h's lists.
#
#   make docs-tables        rewrite the parameter tables in docs/callbacks.md and docs/logging.md
#   make test-docs-tables   fail, with a diff naming the battery, when one was edited by hand or train.h changed
DOCS_TABLES      := $(BUILD)/docs_tables
DOCS_TABLE_PAGES := docs/callbacks.md docs/logging.md

.PHONY: docs-tables test-docs-tables
TEST_TARGETS += test-docs-tables

# -O0: a generator; the optimiser would only add compile time (train.h's implementation is in it).
$(DOCS_TABLES): tests/docs_tables.c tests/doc_sections.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -O0 -o $@ tests/docs_tables.c $(LDLIBS)

docs-tables: $(DOCS_TABLES)
	./$(DOCS_TABLES) --write $(DOCS_TABLE_PAGES)
test-docs-tables: $(DOCS_TABLES)
	./$(DOCS_TABLES) --check $(DOCS_TABLE_PAGES)
