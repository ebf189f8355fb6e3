#!/usr/bin/env python3
"""Join train/'s parts into train.h (make train.h). Short and dumb on purpose:

  train.h = train/train.h.in with @DECLARATIONS@ replaced by every part's declarations, in order, and
  @IMPLEMENTATION@ (inside the frame's TRAIN_IMPLEMENTATION guard) by every part's implementation, in the
  same order. --order prints the parts in that order (tests/parts.sh compiles each on its own).

make train.h also writes, between the lines "generated table: begin/end" of train/battery.h, the table of
which batteries are compiled (TR__ON_<NAME>), from the battery list; --check writes nothing and fails
when either file is not what the parts make.

A part is two halves: its declarations, then its implementation between the lines
"#ifdef TRAIN_IMPLEMENTATION /* implementation */" and "#endif /* implementation */". Lines ending in
"/* part */" (the part's own include guard and the includes of earlier parts) are left out; any other line
after the block is refused (it would be lost), naming the part and the line; an
include of "../x" becomes "x" (train.h sits where train/ does). The order is fixed below; the
batteries come in the order of the battery list TR__BATTERIES (train/battery.h), each from
train/callbacks/<name>.h or train/loggers/<name>.h, inside a generated guard: TR__ON_<NAME>, 1 when
it is compiled (see "which batteries are compiled" in train/battery.h). A part that batteries
include (train/loggers/file_loggers.h) is compiled when any of them is. A battery whose first line
says "needs the trainer" comes after the trainer's wing (train/trainer/: its types and shared helpers, then its
strategies, then its loop), and may live in the wing itself (train/trainer/lr_finder.h)."""
import os, re, sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
TRAIN = os.path.join(ROOT, 'train')
BEFORE = ['base', 'math', 'files', 'records', 'cluster', 'run', 'loop', 'safetensors', 'battery', 'factories']  # then the batteries
TRAINER = ['trainer/core', 'trainer/cuda', 'trainer/mpi', 'trainer/checkpoint', 'trainer/step', 'trainer/fit']
MIDDLE = ['sweep'] + TRAINER  # then the batteries that need the trainer
AFTER = []
GUARD = {'math': '!defined(TRAIN_NO_MATH)', 'sweep': '!defined(TRAIN_NO_SWEEP)'}
GUARD.update((p, '!defined(TRAIN_NO_TRAINER)') for p in TRAINER)
GROUP = {'callbacks': 'TRAIN_NO_CALLBACKS', 'loggers': 'TRAIN_NO_LOGGERS'}


def read(name):
    with open(os.path.join(TRAIN, name + '.h')) as f:
        return f.read().split('\n')[:-1]


def halves(name):
    lines = read(name)
    marks = ['#ifdef TRAIN_IMPLEMENTATION /* implementation */', '#endif /* implementation */']
    for m in marks:
        if lines.count(m) != 1:
            sys.exit('train/%s.h: %d lines "%s" (one is needed: its implementation block is that line to "%s")'
                     % (name, lines.count(m), m, marks[1]))
    start, end = lines.index(marks[0]), lines.index(marks[1])
    for i, l in enumerate(lines[end + 1:], end + 2):   # nothing after the block but the part's own lines
        if l.strip() and not l.endswith('/* part */'):
            sys.exit('train/%s.h:%d: a line after the part\'s implementation block would be left out of train.h: '
                     'move it into the declarations or into the block, or end it with "/* part */": %s' % (name, i, l))
    keep = lambda part: [re.sub(r'^(#\s*include\s+")\.\./', r'\1', l) for l in part if not l.endswith('/* part */')]
    return keep(lines[:start]), keep(lines[start + 1:end])


def batteries():
    text = '\n'.join(read('battery'))
    text = text[text.index('#define TR__BATTERIES(X)'):]
    text = text[:re.search(r'[^\\]\n', text).end()]                # the list ends at a line without a backslash
    rows = re.findall(r'^\s*X\((\w+), (\w+), ', text, re.M)
    out = []
    for name, NAME in rows:
        where = next(g for g in ('callbacks', 'loggers', 'trainer') if os.path.exists(os.path.join(TRAIN, g, name + '.h')))
        part = where + '/' + name
        group = 'callbacks' if where == 'trainer' else where  # lr_finder: a callback that lives in the trainer's wing
        uses = [] if where == 'trainer' else re.findall(r'^#include "(\w+)\.h" /\* part \*/$', '\n'.join(read(part)), re.M)
        out.append((part, NAME, group, 'needs the trainer' in read(part)[0], uses))
    return out


def main(mode):
    check = mode == '--check'
    bats = batteries()
    table = ['#if defined(TRAIN_ONLY_SPECIFIC_BATTERIES)', '#  define TR__PICKED 1', '#else', '#  define TR__PICKED 0', '#endif']
    for part, NAME, group, late, uses in bats:
        off = ['defined(%s)' % GROUP[group], 'defined(TRAIN_NO_%s)' % NAME]
        if late:
            off.append('defined(TRAIN_NO_TRAINER)')
        off.append('(TR__PICKED && !defined(TRAIN_ENABLE_%s))' % NAME)
        table += ['#if ' + ' || '.join(off), '#  define TR__ON_%s 0' % NAME, '#else', '#  define TR__ON_%s 1' % NAME, '#endif']
    support = {}
    for part, NAME, group, late, uses in bats:
        for u in uses:
            support.setdefault(group + '/' + u, []).append('TR__ON_' + NAME)
    for part, ons in support.items():
        table.append('#define TR__ON_%s (%s)' % (part.split('/')[-1].upper(), ' || '.join(ons)))
    battery = os.path.join(TRAIN, 'battery.h')
    with open(battery) as f:
        old = f.read()
    begin, end = '/* generated table: begin */\n', '/* generated table: end */\n'
    new = old[:old.index(begin) + len(begin)] + '\n'.join(table) + '\n' + old[old.index(end):]
    order = [(p, GUARD.get(p)) for p in BEFORE]
    order += [(p, 'TR__ON_' + p.split('/')[-1].upper()) for p in support]
    order += [(p, 'TR__ON_' + N) for p, N, g, late, u in bats if not late]
    order += [(p, GUARD.get(p)) for p in MIDDLE]
    order += [(p, 'TR__ON_' + N) for p, N, g, late, u in bats if late]
    order += [(p, GUARD.get(p)) for p in AFTER]
    if mode == '--order':                       # the parts in order, for tests
        sys.stdout.write(''.join(p + '.h\n' for p, g in order))
        return
    if new != old:
        if check:
            sys.exit('train/battery.h: its table of batteries is not what TR__BATTERIES gives: run make train.h')
        with open(battery, 'w') as f:
            f.write(new)
    decls, impls = [], []
    for part, guard in order:
        d, i = halves(part)
        for out, half in ((decls, d), (impls, i)):
            if guard and any(l.strip() for l in half):
                half = ['#if ' + guard] + half + ['#endif /* %s */' % guard]
            out.extend(half)
    with open(os.path.join(TRAIN, 'train.h.in')) as f:
        frame = f.read()
    text = frame.replace('@DECLARATIONS@\n', '\n'.join(decls) + '\n').replace('@IMPLEMENTATION@\n', '\n'.join(impls) + '\n')
    with open(os.path.join(ROOT, 'train.h')) as f:
        old = f.read()
    if check and old != text:
        sys.exit('train.h is not what train/ generates: run make train.h')
    if not check:                                # written even when the same: newer than every part
        with open(os.path.join(ROOT, 'train.h'), 'w') as f:
            f.write(text)


main(sys.argv[1] if sys.argv[1:] else '')
