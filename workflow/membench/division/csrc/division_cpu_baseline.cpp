// The CPU kernels for any CPU this compiler targets (division_cpu_isa.h).
#define MEMBENCH_CPU_ISA 0
#include "division_cpu_isa.h"
