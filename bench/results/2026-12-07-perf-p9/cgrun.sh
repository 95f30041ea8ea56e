#!/bin/bash
# usage: cgrun.sh tree backend mode N tag
cd /tmp/p9prof/$1 && PYTHONHASHSEED=0 PYTHONPATH=. TURNQUEUE_TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/p9prof/cg-$5.out /work/main/.venv/bin/python /tmp/p9prof/cg.py $2 $3 $4 > /tmp/p9prof/cg-$5.txt 2>&1
