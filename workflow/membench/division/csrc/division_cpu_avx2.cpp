// The CPU kernels for x86-64 CPUs with AVX2, FMA and BMI2 (division_cpu_isa.h); empty elsewhere.
#include "division_cpu_kernels.h"
#ifdef MEMBENCH_X86_DISPATCH
#define MEMBENCH_CPU_ISA 1
#include "division_cpu_isa.h"
#endif
