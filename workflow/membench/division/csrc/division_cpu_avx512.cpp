// The CPU kernels for x86-64 CPUs with AVX-512 (F, BW, VL, DQ) (division_cpu_isa.h); empty elsewhere.
#include "division_cpu_kernels.h"
#ifdef MEMBENCH_X86_DISPATCH
#define MEMBENCH_CPU_ISA 2
#include "division_cpu_isa.h"
#endif
