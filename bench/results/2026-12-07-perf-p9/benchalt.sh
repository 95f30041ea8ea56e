#!/bin/bash
# alternating P9 runs of the bench from git-archive trees: before (0e5988c) and after (HEAD)
for i in 1 2 3; do
  if [ $((i % 2)) = 1 ]; then order="before after2"; else order="after2 before"; fi
  for b in sqlite postgresql; do
    for t in $order; do
      cd /tmp/p9prof/$t && PYTHONPATH=. TURNQUEUE_TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test /work/main/.venv/bin/python -m bench --only P9 --backend $b --reps 1 --out /tmp/p9prof/bench-out --label $t-$b-r$i > /tmp/p9prof/bench-out/$t-$b-r$i.log 2>&1
    done
  done
done
echo done > /tmp/p9prof/bench-out/ALLDONE
