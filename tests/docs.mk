# tests/docs.mk - the docs' generated sections: parameter tables from train.h's lists, the messages docs/
# quotes, from the program itself, and docs/loop.svg, the README's picture.
#
#   make docs-tables           rewrite the parameter tables in docs/callbacks.md and docs/logging.md
#   make test-docs-tables      fail, with a diff naming the battery, when one was edited by hand or train.h changed
#   make readme-messages       rewrite the quoted messages in docs/reference.md and docs/callbacks.md
#   make test-readme-messages  fail, with a diff, when a quote differs from what the program says
DOCS_TABLES        := $(BUILD)/docs_tables
DOCS_TABLE_PAGES   := docs/callbacks.md docs/logging.md
README_MESSAGES    := $(BUILD)/readme_messages
README_MSG_PAGES   := docs/reference.md docs/callbacks.md

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

# docs/loop.svg, the README's picture of where each event and each call of a loop of your own sits, is drawn by
# tests/loop_svg.c from hooks.h's event list and a real run of the run layer: committed (make demo and a fresh
# clone need no generator), and test-loop-svg fails when it is not what they draw now, or when rsvg-convert
# cannot render it.
#
#   make loop-svg        rewrite docs/loop.svg
#   make test-loop-svg   fail, naming the fix, when docs/loop.svg is stale; render it and check the picture
LOOP_SVG := $(BUILD)/loop_svg
.PHONY: loop-svg test-loop-svg
TEST_TARGETS += test-loop-svg
$(LOOP_SVG): tests/loop_svg.c hooks.h train.h | $(BUILD)
	$(CC) $(ALL_CFLAGS) -O0 -o $@ tests/loop_svg.c $(LDLIBS)
loop-svg: $(LOOP_SVG)
	@mkdir -p $(BUILD)/loop_svg_tmp
	./$(LOOP_SVG) docs/loop.svg $(BUILD)/loop_svg_tmp
test-loop-svg: $(LOOP_SVG) $(BUILD)/png_check
	@mkdir -p $(BUILD)/loop_svg_tmp
	@./$(LOOP_SVG) $(BUILD)/loop_svg_tmp/loop.svg $(BUILD)/loop_svg_tmp
	@cmp -s docs/loop.svg $(BUILD)/loop_svg_tmp/loop.svg || { diff docs/loop.svg $(BUILD)/loop_svg_tmp/loop.svg | head -20; \
	  echo "test-loop-svg: docs/loop.svg is not what hooks.h's events and the run layer draw now: run make loop-svg and commit it"; exit 1; }
	@rsvg-convert -o $(BUILD)/loop_svg_tmp/loop.png docs/loop.svg
	@$(BUILD)/png_check $(BUILD)/loop_svg_tmp/loop.png 2f6db5 e07b00
	@echo "test-loop-svg: docs/loop.svg is what the event list and the run layer draw, and renders"

# Comment density (scripts/density.py): train/'s comment words per 1,000 lines of code stay at or under 2,000;
# the figures per part, densest first, and above the limit the parts with the most words over it.
.PHONY: test-density
TEST_TARGETS += test-density
test-density:
	@python3 scripts/density.py --max 2000
