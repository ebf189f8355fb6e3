# tests/docs.mk - the docs' generated sections: parameter tables from train.h's lists, and the messages
# README.md and docs/ quote, from the program itself.
#
#   make docs-tables           rewrite the parameter tables in docs/callbacks.md and docs/logging.md
#   make test-docs-tables      fail, with a diff naming the battery, when one was edited by hand or train.h changed
#   make readme-messages       rewrite the quoted messages in README.md and docs/callbacks.md
#   make test-readme-messages  fail, with a diff, when a quote differs from what the program says
DOCS_TABLES        := $(BUILD)/docs_tables
DOCS_TABLE_PAGES   := docs/callbacks.md docs/logging.md
README_MESSAGES    := $(BUILD)/readme_messages
README_MSG_PAGES   := README.md docs/callbacks.md

.PHONY: docs-tables test-docs-tables readme-messages test-readme-messages
TEST_TARGETS += test-docs-tables test-readme-messages

# -O0: generators; the optimiser would only add compile time (train.h's implementation is in each).
$(DOCS_TABLES): tests/docs_tables.c tests/doc_sections.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -O0 -o $@ tests/docs_tables.c $(LDLIBS)
$(README_MESSAGES): tests/readme_messages.c tests/doc_sections.h hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -O0 -o $@ tests/readme_messages.c $(LDLIBS)

docs-tables: $(DOCS_TABLES)
	./$(DOCS_TABLES) --write $(DOCS_TABLE_PAGES)
test-docs-tables: $(DOCS_TABLES)
	./$(DOCS_TABLES) --check $(DOCS_TABLE_PAGES)

readme-messages: $(README_MESSAGES)
	./$(README_MESSAGES) --write $(README_MSG_PAGES)
test-readme-messages: $(README_MESSAGES)
	./$(README_MESSAGES) --check $(README_MSG_PAGES)
