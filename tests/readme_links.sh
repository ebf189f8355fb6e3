#!/bin/sh
# README.md, docs/*.md and the headers refer only to what ships with the project: every relative link
# of the markdown pages names a file of the repository, and nothing points outside it.
# usage: tests/readme_links.sh   (from the repository root)
set -eu
bad=0
for f in README.md docs/*.md hooks.h train.h kernels/*.cuh; do
  if grep -n -e '\.\./shared' -e 'shared/reference' -e 'lightning\.md' -e 'seeds/' "$f"; then
    echo "readme-links: $f refers to a file outside the repository (above); name what ships with it instead" >&2
    bad=1
  fi
done
for f in README.md docs/*.md; do
  dir=$(dirname "$f")
  # ](target) and ](target#anchor), relative targets only
  for t in $(grep -o '](\([^)#: ]*\)[)#]' "$f" | sed 's/^](//; s/[)#]$//' | sort -u); do
    [ -n "$t" ] || continue
    [ -e "$dir/$t" ] || { echo "readme-links: $f links to $t, which is not in the repository ($dir/$t)" >&2; bad=1; }
  done
done
[ "$bad" = 0 ] || exit 1
echo "readme-links: README.md and docs/ link only to files that exist; no page refers outside the repository"
