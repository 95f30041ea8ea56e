#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void cg_zero(void) { CALLGRIND_ZERO_STATS; }
void cg_dump(const char *name) { CALLGRIND_DUMP_STATS_AT(name); }
