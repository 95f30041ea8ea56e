import re, glob
rows = {}
for f in sorted(glob.glob('/tmp/p9prof/bench-out/2026-12-07-*.md')):
    m = re.search(r'-(sqlite|postgresql)-(before|after2)-\w+-r(\d)\.md', f)
    store, side, r = m.groups()
    for line in open(f):
        if not line.startswith('| P9'): continue
        cells = [c.strip() for c in line.split('|')]
        name = cells[2]
        if 'P2 workload' in name and 'turns/s' in name: key = 'turns/s, P2 workload (log / memory)'
        elif 'P2 workload' in name and 'CPU' in name: key = 'CPU per turn, P2 workload (memory / log)'
        elif '5 chunks' in name and 'turns/s' in name: key = 'turns/s, 5 chunks 16 ms apart (log / memory)'
        elif '5 chunks' in name and 'CPU' in name: key = 'CPU per turn, 5 chunks 16 ms apart (memory / log)'
        elif 'streaming 4000' in name: key = 'CPU of a 4,000-chunk streaming turn (memory / log)'
        else: continue
        rows.setdefault(key, {}).setdefault((store, side), []).append((int(r), cells[5]))
print('| figure | SQLite before | SQLite after | PostgreSQL before | PostgreSQL after |')
print('|---|---|---|---|---|')
for key, d in rows.items():
    out = []
    for col in (('sqlite','before'),('sqlite','after2'),('postgresql','before'),('postgresql','after2')):
        out.append(' / '.join(v for _, v in sorted(d.get(col, []))))
    print(f'| {key} | ' + ' | '.join(out) + ' |')
