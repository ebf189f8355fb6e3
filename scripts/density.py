#!/usr/bin/env python3
"""Comment density of train/'s parts: comment words per 1,000 lines of code (make test-density).

  comment words  the words inside /* */ and // comments; a word is a run of non-blank characters with at least
                 one letter or digit in it (so a block comment's " * " border and "----" rules are no words);
  code lines     the non-blank lines that are not only comment (a line of code with a comment at its end counts);
  density        comment words * 1000 / code lines, per part and for train/ in total.

Strings and character literals are read as code ("//" inside "http://..." is not a comment).

  scripts/density.py                 every part, densest first, and the total
  scripts/density.py --max N         the same; exit 1 when the total is above N, naming the worst parts
  scripts/density.py FILE...         only those files"""
import os, re, sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
WORD = re.compile(r'\S*[A-Za-z0-9]\S*')


def measure(text):
    """(comment words, code lines) of C source text."""
    words, code_lines = 0, 0
    comment = []                # the current comment's text
    in_block = False
    for line in text.split('\n'):
        has_code = False
        i, n = 0, len(line)
        while i < n:
            if in_block:
                end = line.find('*/', i)
                if end < 0:
                    comment.append(line[i:])
                    i = n
                else:
                    comment.append(line[i:end])
                    in_block, i = False, end + 2
            elif line.startswith('/*', i):
                in_block, i = True, i + 2
            elif line.startswith('//', i):
                comment.append(line[i + 2:])
                i = n
            elif line[i] in '"\'':
                q, i, has_code = line[i], i + 1, True
                while i < n and line[i] != q:
                    i += 2 if line[i] == '\\' else 1
                i += 1
            else:
                has_code = has_code or not line[i].isspace()
                i += 1
        code_lines += has_code
    for c in comment:
        words += len(WORD.findall(c))
    return words, code_lines


def parts():
    out = []
    for d, _, files in os.walk(os.path.join(ROOT, 'train')):
        out += [os.path.relpath(os.path.join(d, f), ROOT) for f in files if f.endswith(('.h', '.h.in'))]
    return sorted(out)


def main(argv):
    limit = None
    if argv[:1] == ['--max']:
        limit, argv = float(argv[1]), argv[2:]
    files = argv or parts()
    rows = []
    for f in files:
        with open(os.path.join(ROOT, f) if not os.path.isabs(f) else f) as fh:
            w, c = measure(fh.read())
        rows.append((w * 1000.0 / max(c, 1), w, c, f))
    rows.sort(reverse=True)
    tw, tc = sum(r[1] for r in rows), sum(r[2] for r in rows)
    total = tw * 1000.0 / max(tc, 1)
    print('%-42s %7s %6s %6s' % ('part', 'words', 'code', 'w/kloc'))
    for d, w, c, f in rows:
        print('%-42s %7d %6d %6.0f' % (f, w, c, d))
    print('%-42s %7d %6d %6.0f' % ('total', tw, tc, total))
    if limit is not None and total > limit:
        worst = sorted(rows, key=lambda r: r[1] - limit * r[2] / 1000.0, reverse=True)[:5]
        print('density: train/ has %.0f comment words per 1,000 lines of code, above %.0f: move design prose to '
              'docs/ and keep comments that say why; the most words above the limit: %s'
              % (total, limit, ', '.join('%s (%+.0f)' % (r[3], r[1] - limit * r[2] / 1000.0) for r in worst)))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
