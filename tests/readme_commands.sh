#!/bin/sh
# Every command of README.md's ```sh blocks works from the repository root as written: a `make` line names
# targets that exist (make -n: the targets themselves are make test's own), any other line runs, in a copy of
# the working tree (.git and build/ left out, so it writes nothing here), and must exit 0.
# usage: tests/readme_commands.sh <scratch-dir>   (from the repository root)
set -eu
out=$1
rm -rf "$out" && mkdir -p "$out/tree"
awk '/^```sh$/ { inblock = 1; next } /^```$/ { inblock = 0; next } inblock' README.md > "$out/commands"
[ -s "$out/commands" ] || { echo "readme-commands: README.md has no \`\`\`sh block" >&2; exit 1; }
tar cf - --exclude=./build --exclude=./.git . | (cd "$out/tree" && tar xf -)
n=0
while IFS= read -r line; do
  case "$line" in
    ''|'#'*) continue ;;
    make\ *) args=${line#make }; make -n -s ${args%%#*} > /dev/null 2> "$out/err" ||
               { cat "$out/err" >&2; echo "readme-commands: '$line' from README.md names a target make does not have" >&2; exit 1; } ;;
    *) (cd "$out/tree" && sh -c "$line") > "$out/log" 2>&1 ||
         { cat "$out/log" >&2; echo "readme-commands: '$line' from README.md fails from the repository root" >&2; exit 1; } ;;
  esac
  n=$((n + 1))
done < "$out/commands"
echo "readme-commands: the $n commands of README.md work from the repository root as written"
