/* One-pass update rules for slotopt, over a whole (device, dtype) group of tensors per call.
 *
 * A plain C shared library, loaded with ctypes (no Python C API, no torch C++ ABI). Every rule is written in
 * exactly the evaluation order of the foreach kernel of the same name in slotopt/kernels/ *.py, which is the
 * specification: each operation is rounded separately in the tensor dtype (the build uses -ffp-contract=off
 * and no fast-math, so no fused multiply-add and no reassociation), square roots and divisions are the
 * correctly rounded IEEE ones, and scalars are rounded to the tensor dtype first, as torch does for a Python
 * number applied to a float32 or float64 tensor.
 *
 * Calling convention, the same for every rule:
 *   void rule_f32(int64_t n, void *const *ptr, const int64_t *off, const double *s, int threads)
 *   n       number of tensors in the group;
 *   ptr     list-major table of data pointers: ptr[j * n + k] is tensor k of operand list j;
 *   off     n + 1 prefix sums of the element counts (off[0] = 0, off[n] = total);
 *   s       the rule's scalars (flags as 0.0 / 1.0), in the order documented at each rule;
 *   threads OpenMP threads to use (the caller passes torch.get_num_threads()).
 * The elements of the whole group are split into one contiguous range per thread, so 2000 small tensors cost
 * one call and one parallel region, not 2000.
 */
#include <math.h>
#include <stdint.h>
#include <stddef.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define SLOTOPT_ABI_VERSION 1
int slotopt_abi_version(void) { return SLOTOPT_ABI_VERSION; }

/* The build targets the building machine's processor (-march=native). Loading it on a processor without one
 * of the extensions it was compiled for must be refused, not crash: this check itself is compiled for the
 * baseline architecture, and the loader calls it before any rule. */
#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("arch=x86-64")))
#endif
int slotopt_cpu_supported(void) {
#if defined(__GNUC__) && defined(__x86_64__)
    __builtin_cpu_init();
#ifdef __AVX512F__
    if (!__builtin_cpu_supports("avx512f")) return 0;
#endif
#ifdef __AVX512BW__
    if (!__builtin_cpu_supports("avx512bw")) return 0;
#endif
#ifdef __AVX512VL__
    if (!__builtin_cpu_supports("avx512vl")) return 0;
#endif
#ifdef __AVX2__
    if (!__builtin_cpu_supports("avx2")) return 0;
#endif
#ifdef __AVX__
    if (!__builtin_cpu_supports("avx")) return 0;
#endif
#ifdef __FMA__
    if (!__builtin_cpu_supports("fma")) return 0;
#endif
#ifdef __BMI2__
    if (!__builtin_cpu_supports("bmi2")) return 0;
#endif
#endif
    return 1;
}

/* Below this many elements in a group, one thread: a parallel region costs more than it saves. */
#define MIN_PARALLEL_ELEMENTS 32768

#ifdef _OPENMP
#define THREAD_ID() omp_get_thread_num()
#define THREAD_COUNT() omp_get_num_threads()
#else
#define THREAD_ID() 0
#define THREAD_COUNT() 1
#endif

/* Runs the statements in __VA_ARGS__ for every piece [s, e) of tensor k that falls in this thread's range.
 * The body declares its pointers with P(j) and loops over i in [s, e). */
#define GROUP_LOOP(...)                                                                                      \
    do {                                                                                                   \
        const int64_t total_ = off[n];                                                                      \
        int threads_ = (total_ < MIN_PARALLEL_ELEMENTS || threads < 1) ? 1 : threads;                      \
        _Pragma("omp parallel num_threads(threads_)")                                                       \
        {                                                                                                  \
            const int64_t nth_ = THREAD_COUNT(), tid_ = THREAD_ID();                                        \
            int64_t lo_ = total_ * tid_ / nth_;                                                            \
            const int64_t hi_ = total_ * (tid_ + 1) / nth_;                                                \
            int64_t a_ = 0, b_ = n; /* first k with off[k + 1] > lo_ */                                   \
            while (a_ < b_) {                                                                              \
                int64_t mid_ = (a_ + b_) / 2;                                                              \
                if (off[mid_ + 1] > lo_) b_ = mid_; else a_ = mid_ + 1;                                    \
            }                                                                                              \
            int64_t k = a_;                                                                                \
            while (lo_ < hi_ && k < n) {                                                                   \
                const int64_t end_ = hi_ < off[k + 1] ? hi_ : off[k + 1];                                  \
                const int64_t s = lo_ - off[k], e = end_ - off[k];                                         \
                if (e > s) { __VA_ARGS__ }                                                                 \
                lo_ = end_;                                                                                \
                k++;                                                                                       \
            }                                                                                              \
        }                                                                                                  \
    } while (0)

#define P(j) ((T *)ptr[(size_t)(j) * (size_t)n + (size_t)k])

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define RULE(name) void CAT(name, SFX)(int64_t n, void *const *ptr, const int64_t *off, const double *s_, \
                                       int threads)

#define T float
#define SFX f32
#define SQRT sqrtf
#define FABS fabsf
#include "rules.inc"
#undef T
#undef SFX
#undef SQRT
#undef FABS

#define T double
#define SFX f64
#define SQRT sqrt
#define FABS fabs
#include "rules.inc"
