/* One-pass update rules for slotopt, over a whole (device, dtype) group of tensors per call.
 *
 * A plain C shared library, loaded with ctypes (no Python C API, no torch C++ ABI). Every rule is written in
 * exactly the evaluation order of the foreach kernel of the same name in slotopt/kernels/ *.py, which is the
 * specification: each operation is rounded separately in the tensor dtype (the build uses -ffp-contract=off
 * and no fast-math, so no fused multiply-add and no reassociation), square roots and divisions are the
 * correctly rounded IEEE ones, and scalars are rounded to the tensor dtype first, as torch does for a Python
 * number applied to a float32 or float64 tensor. float16 and bfloat16 tensors are computed as torch's CPU
 * kernels compute them: each op in float32, its result rounded to the half type (see rules.inc).
 *
 * Calling convention, the same for every rule:
 *   void rule_f32(int64_t n, void *const *ptr, const int64_t *off, const double *s, int threads)
 *   n       number of tensors in the group;
 *   ptr     list-major table of data pointers: ptr[j * n + k] is tensor k of operand list j;
 *   off     n + 1 prefix sums of the element counts (off[0] = 0, off[n] = total);
 *   s       the rule's scalars (flags as 0.0 / 1.0), in the order of its description (rules_scalars.h);
 *   threads OpenMP threads to use (the caller passes torch.get_num_threads()).
 * The elements of the whole group are split into one contiguous range per thread, so 2000 small tensors cost
 * one call and one parallel region, not 2000.
 */
#include <math.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "rules_scalars.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#define SLOTOPT_ABI_VERSION 1

/* The build compiles this file once per instruction set (setup.py): for the x86-64 baseline (SSE2), which runs on
 * every x86-64 processor, and where the compiler can, for x86-64-v3 (AVX2) and x86-64-v4 (AVX-512), each into its
 * own library. The loader (kernels/native) loads the best one whose slotopt_cpu_supported() says yes, so a wheel
 * built on one machine runs on any other. The two functions the loader calls before that answer are themselves
 * compiled for the baseline in every variant, so asking never executes an instruction the processor lacks
 * (tests/kernels/test_native_portable.py reads the machine code to check it). Every variant computes the same bits: the
 * rules round each operation separately (-ffp-contract=off, no fast-math), so a wider vector changes no result. */
#if defined(__GNUC__) && defined(__x86_64__)
#define BASELINE_ __attribute__((target("arch=x86-64")))
#else
#define BASELINE_
#endif

BASELINE_ int slotopt_abi_version(void) { return SLOTOPT_ABI_VERSION; }

/* The instruction set this variant was compiled for ("x86-64", "x86-64-v3", "x86-64-v4", or "other"). */
#if defined(__AVX512F__)
#define SLOTOPT_ISA_ "x86-64-v4"
#elif defined(__AVX2__)
#define SLOTOPT_ISA_ "x86-64-v3"
#elif defined(__x86_64__)
#define SLOTOPT_ISA_ "x86-64"
#else
#define SLOTOPT_ISA_ "other"
#endif
BASELINE_ const char *slotopt_isa(void) { return SLOTOPT_ISA_; }

/* Whether this processor has every extension this variant was compiled for: the loader asks before any rule. */
BASELINE_ int slotopt_cpu_supported(void) {
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
#ifdef __AVX512DQ__
    if (!__builtin_cpu_supports("avx512dq")) return 0;
#endif
#ifdef __AVX512CD__
    if (!__builtin_cpu_supports("avx512cd")) return 0;
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
#ifdef __F16C__
    if (!__builtin_cpu_supports("f16c")) return 0;
#endif
#ifdef __BMI__
    if (!__builtin_cpu_supports("bmi")) return 0;
#endif
#ifdef __BMI2__
    if (!__builtin_cpu_supports("bmi2")) return 0;
#endif
#ifdef __LZCNT__
    if (!__builtin_cpu_supports("lzcnt")) return 0;
#endif
#ifdef __MOVBE__
    if (!__builtin_cpu_supports("movbe")) return 0;
#endif
#ifdef __POPCNT__
    if (!__builtin_cpu_supports("popcnt")) return 0;
#endif
#ifdef __SSE4_2__
    if (!__builtin_cpu_supports("sse4.2")) return 0;
#endif
#ifdef __SSE4_1__
    if (!__builtin_cpu_supports("sse4.1")) return 0;
#endif
#ifdef __SSSE3__
    if (!__builtin_cpu_supports("ssse3")) return 0;
#endif
#ifdef __SSE3__
    if (!__builtin_cpu_supports("sse3")) return 0;
#endif
#endif
    return 1;
}

/* Bounds of a call, checked in C before the rule runs when slotopt asks for it (``SLOTOPT_NATIVE_DEBUG=1``
 * at build time compiles it in as the default, -DSLOTOPT_BOUNDS_CHECK; ``native.check_bounds(True)`` or the same
 * variable at run time turns it on with any build). Python computes every pointer and length a rule sees from
 * indices and sizes it checked; this re-checks the result against extents Python reads independently from the
 * tensor objects: off[0] == 0, off never decreases, and every non-null entry ptr[j * n + k] with its
 * off[k + 1] - off[k] elements of elsize bytes lies inside [lo[j * n + k], hi[j * n + k]). Returns -1 when all
 * hold, else the first failing entry (-2 for the offsets themselves). */
#ifdef SLOTOPT_BOUNDS_CHECK
int slotopt_bounds_checked(void) { return 1; }
#else
int slotopt_bounds_checked(void) { return 0; }
#endif

int64_t slotopt_check_table(int64_t lists, int64_t n, const uint64_t *ptr, const int64_t *off,
                            const uint64_t *lo, const uint64_t *hi, int64_t elsize) {
    if (n < 0 || lists < 0 || elsize <= 0 || off[0] != 0) return -2;
    for (int64_t k = 0; k < n; k++)
        if (off[k + 1] < off[k]) return -2;
    for (int64_t j = 0; j < lists; j++) {
        for (int64_t k = 0; k < n; k++) {
            const int64_t entry = j * n + k;
            const uint64_t p = ptr[entry];
            if (p == 0) continue; /* an absent optional operand list: the rule's flags say it is not read */
            const uint64_t bytes = (uint64_t)(off[k + 1] - off[k]) * (uint64_t)elsize;
            if (p < lo[entry] || p > hi[entry] || bytes > hi[entry] - p) return entry;
        }
    }
    return -1;
}

/* TensorFlow runs its kernels with subnormal numbers flushed to zero (FTZ: subnormal results become 0; DAZ:
 * subnormal inputs read as 0). slotopt's step sets the same mode on the calling thread
 * (numerics.flush_to_zero, through slotopt_denormal_mode), and every rule's worker threads take the calling
 * thread's mode for the duration of the rule, so the result does not depend on how many threads ran. */
#if defined(__SSE__)
#include <xmmintrin.h>
#define DENORMAL_BITS_ 0x8040u /* MXCSR flush-to-zero | denormals-are-zero */
/* Sets this thread's FTZ/DAZ bits to bits (0 or 0x8040) and returns the previous ones. */
int slotopt_denormal_mode(int bits) {
    const unsigned int csr = _mm_getcsr();
    _mm_setcsr((csr & ~DENORMAL_BITS_) | ((unsigned int)bits & DENORMAL_BITS_));
    return (int)(csr & DENORMAL_BITS_);
}
#define CALLER_MODE_() const unsigned int caller_mode_ = _mm_getcsr() & DENORMAL_BITS_
#define ENTER_MODE_() const unsigned int saved_csr_ = _mm_getcsr(); \
    _mm_setcsr((saved_csr_ & ~DENORMAL_BITS_) | caller_mode_)
#define LEAVE_MODE_() _mm_setcsr(saved_csr_)
#else
#define CALLER_MODE_() do { } while (0)
#define ENTER_MODE_() do { } while (0)
#define LEAVE_MODE_() do { } while (0)
#endif

/* Below this many elements in a group, one thread: a parallel region costs more than it saves. */
#define MIN_PARALLEL_ELEMENTS 32768

#ifdef _OPENMP
#define THREAD_ID() omp_get_thread_num()
#define THREAD_COUNT() omp_get_num_threads()
#else
#define THREAD_ID() 0
#define THREAD_COUNT() 1
#endif

/* The first k in [0, n] with sorted[k] >= x (n when there is none), for nondecreasing prefix sums. */
static inline int64_t first_at_least_(const int64_t *sorted, int64_t n, int64_t x) {
    int64_t a = 0, b = n;
    while (a < b) {
        const int64_t mid = (a + b) / 2;
        if (sorted[mid] >= x) b = mid; else a = mid + 1;
    }
    return a;
}

/* Runs the statements in __VA_ARGS__ for every piece [s, e) of tensor k that falls in this thread's range.
 * The body declares its pointers with P(j) and loops over i in [s, e). */
#define GROUP_LOOP(...)                                                                                      \
    do {                                                                                                   \
        const int64_t total_ = off[n];                                                                      \
        int threads_ = (total_ < MIN_PARALLEL_ELEMENTS || threads < 1) ? 1 : threads;                      \
        CALLER_MODE_();                                                                                    \
        _Pragma("omp parallel num_threads(threads_)")                                                       \
        {                                                                                                  \
            ENTER_MODE_();                                                                                 \
            const int64_t nth_ = THREAD_COUNT(), tid_ = THREAD_ID();                                        \
            int64_t lo_ = total_ * tid_ / nth_;                                                            \
            const int64_t hi_ = total_ * (tid_ + 1) / nth_;                                                \
            int64_t k = first_at_least_(off + 1, n, lo_ + 1); /* the first tensor ending past lo_ */        \
            while (lo_ < hi_ && k < n) {                                                                   \
                const int64_t end_ = hi_ < off[k + 1] ? hi_ : off[k + 1];                                  \
                const int64_t s = lo_ - off[k], e = end_ - off[k];                                         \
                if (e > s) { GM_PIECE_DECL __VA_ARGS__ }                                                   \
                lo_ = end_;                                                                                \
                k++;                                                                                       \
            }                                                                                              \
            LEAVE_MODE_();                                                                                 \
        }                                                                                                  \
    } while (0)

#define P(j) ((E *)ptr[(size_t)(j) * (size_t)n + (size_t)k])

/* The gradient operand's element i (rules.inc's LG) and the map's values handed to a rule's helpers: without a map,
 * the element as it is (the mapped instantiations below redefine these). */
#define LG(p, i) LD((p)[i])
#define GM_PARAM
#define GM_ARG
#define GM_PIECE_DECL

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define RULE(name) void CAT(name, SFX)(int64_t n, void *const *ptr, const int64_t *off, const double *s_, \
                                       int threads)

/* TensorFlow's fused float32 ApplyAdagrad, ApplyProximalAdagrad and ApplyAdadelta kernels take rsqrt(x) with
 * Eigen's packet prsqrt on the whole 8-float packets of each tensor (each row, in the sparse kernels): the CPU's
 * rsqrtps estimate refined by one Newton step, each multiply and add rounded (TensorFlow's wheels are built for
 * AVX without FMA); the remaining elements take 1 / sqrt(x). The estimate's bits are the CPU vendor's, so these
 * results match TensorFlow's on the same vendor's processors (numerics/ops.py: rsqrt uses this helper too). The
 * scalar rsqrtss gives the same estimate as each lane of the packed instruction, and the SSE and AVX encodings the
 * same bits, so every x86-64 variant of this library has it. */
#if defined(__SSE__)
#include <immintrin.h>
#define SLOTOPT_HAS_RSQRT_ESTIMATE 1
static inline float tf_prsqrt_f32_(float a) {
    const float y = _mm_cvtss_f32(_mm_rsqrt_ss(_mm_set_ss(a)));
    const float r2 = a * y, half_r = y * -0.5f;
    const float h = r2 * y + -1.0f;
    const float z = half_r * h + y;
    return z != z ? y : z; /* zero, infinity, NaN: the estimate itself */
}
/* The rsqrt of element i of a tensor of len elements; row > 0: packets start at every row of row elements. */
static inline float tf_rsqrt_f32_at_(float x, int64_t i, int64_t len, int64_t row) {
    const int64_t pos = row > 0 ? i % row : i, span = row > 0 ? row : len;
    return pos < (span & ~(int64_t)7) ? tf_prsqrt_f32_(x) : 1.0f / sqrtf(x);
}
/* out[i] = Eigen's packet rsqrt of x[i] for the elements in whole packets (from each row's start); the others
 * are left as they are (the caller has stored 1 / sqrt(x) there). */
void slotopt_tf_rsqrt_f32(const float *x, float *out, int64_t n, int64_t row) {
    if (row <= 0) row = n;
    for (int64_t start = 0; start + row <= n; start += row) {
        const int64_t whole = row & ~(int64_t)7;
        for (int64_t i = 0; i < whole; i++) out[start + i] = tf_prsqrt_f32_(x[start + i]);
    }
}
#endif

/* The position of the first of k row indices outside [0, rows), or -1 (the rules on slices check every index
 * before they write anything: the indices are data, not pointers Python computed). */
static inline int64_t first_index_outside_(const int64_t *idx, int64_t k, int64_t rows) {
    for (int64_t j = 0; j < k; j++)
        if ((uint64_t)idx[j] >= (uint64_t)rows) return j;
    return -1;
}

/* The rows of slices are spread over a large table: each is a cache (and TLB) miss the hardware prefetcher cannot
 * predict, and a serial pass would wait for them one after the other. The rules on slices ask for the rows of the
 * slice this many ahead (its index is known), so the misses overlap; prefetching changes no result. */
#define SLICE_PREFETCH_AHEAD 16
/* The first bytes of a row (the hardware prefetcher follows a long row by itself), for writing. */
static inline void prefetch_row_(const void *row, int64_t bytes) {
    const char *p = (const char *)row;
    if (bytes > 1024) bytes = 1024;
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 1, 3);
    __builtin_prefetch(p + bytes - 1, 1, 3); /* a row not aligned to a line ends in one line more */
}

/* Tensor k + 1's first ``ops`` operands (rows of the pointer table), prefetched for writing as tensor k's piece
 * begins: the first lines of a small tensor's streams are read before the hardware prefetcher has found them, so
 * on many small tensors each stream start was a miss the pass waited for. Prefetching changes no result. */
#define PREFETCH_NEXT(ops)                                                                                  \
    do {                                                                                                    \
        if (k + 1 < n && s == 0) {                                                                         \
            const int64_t bytes_ = (off[k + 2] - off[k + 1]) * (int64_t)sizeof(E);                          \
            for (int j_ = 0; j_ < (ops); j_++) prefetch_row_(ptr[(size_t)j_ * (size_t)n + (size_t)k + 1], bytes_); \
        }                                                                                                   \
    } while (0)

/* float32 and float64: every operator is one torch op, rounded in the dtype itself. */
#define LD(x) (x)
#define ST(x) (x)
#define R(x) (x)
#define SF(x) ((T)(x))
#define SH(x) ((T)(x))

#define T float
#define E float
#define SFX f32
#define SQRT sqrtf
#define FABS fabsf
#ifdef SLOTOPT_HAS_RSQRT_ESTIMATE
#define TF_RSQRT(x, i, len, row) tf_rsqrt_f32_at_((x), (i), (len), (row))
#endif
#include "rules.inc"
#undef T
#undef E
#undef SFX
#undef SQRT
#undef FABS
#undef TF_RSQRT

#define T double
#define E double
#define SFX f64
#define SQRT sqrt
#define FABS fabs
#include "rules.inc"
#undef T
#undef E
#undef SFX
#undef SQRT
#undef FABS

/* The update rules with a gradient map in their prologue (engine/compiled_maps.py): instead of a pass that writes the
 * mapped gradients into a buffer the rule then reads, the rule maps each gradient element where it loads it (LG), in
 * registers: x / divisor (flag 1: Keras 3's loss_scale_factor), torch.clamp(x, lo, hi) with NaN kept (flag 2:
 * clipvalue), (x * clip) / d[k] (flag 4: clip by norm, one denominator per tensor), x * scale (flag 8: clip by global
 * norm), in that order, each one IEEE operation in the dtype with the scalars taken in the dtype: exactly the
 * operations of slotopt_gradient_map (gradient_maps.inc), whose results the rule read back from memory, so the bits
 * are the same and the gradients are read once with nothing written. float32 and float64 (the dtypes the maps are
 * compiled for); one instantiation per common case, whose constant mode lets the loops vectorize as the plain
 * rules' do (gm1 unscale, gm2 clipvalue, gm4 clipnorm, gm8 global clipnorm), and gmx for any combination (flags
 * read per element, a loop-invariant branch). A mapped rule is the plain rule's name and dtype suffix with _gmN
 * appended; it takes two more arguments:
 *   const double *gm   {flags, divisor, lo, hi, clip, scale};
 *   const void *d      the n per-tensor denominators, of the dtype (flag 4), else NULL. */
typedef struct { float divisor, lo, hi, clip, scale, d; int flags; } gm_f32_;
typedef struct { double divisor, lo, hi, clip, scale, d; int flags; } gm_f64_;
static inline float gm_clamp_f32_(float v, float lo, float hi) { return v != v ? v : CLAMP_MAX(CLAMP_MIN(v, lo), hi); }
static inline double gm_clamp_f64_(double v, double lo, double hi) {
    return v != v ? v : CLAMP_MAX(CLAMP_MIN(v, lo), hi);
}
#define GM_ANY_(NAME, T, GMT, CLAMP)                                                                          \
    static inline T NAME(T v, const GMT m) {                                                                \
        if (m.flags & 1) v = v / m.divisor;                                                                  \
        if (m.flags & 2) v = CLAMP(v, m.lo, m.hi);                                                           \
        if (m.flags & 4) v = (v * m.clip) / m.d;                                                             \
        if (m.flags & 8) v = v * m.scale;                                                                    \
        return v;                                                                                            \
    }
GM_ANY_(gm_any_f32_, float, gm_f32_, gm_clamp_f32_)
GM_ANY_(gm_any_f64_, double, gm_f64_, gm_clamp_f64_)
#undef GM_ANY_

#undef RULE
#undef LG
#undef GM_PARAM
#undef GM_ARG
#undef GM_PIECE_DECL
/* A mapped rule: the exported function reads the map into a struct handed by value to the rule's body (static, named
 * with a final "_" as every internal helper, tests/kernels/test_native_portable.py; a copy
 * in registers, which no store of the rule can alias), and each piece of tensor k takes its denominator. */
#define RULE(name)                                                                                           \
    static void CAT(name, CAT(SFX, body_))(int64_t n, void *const *ptr, const int64_t *off, const double *s_,   \
                                          int threads, const GMT gmv_, const T *gmd_);                      \
    void CAT(name, SFX)(int64_t n, void *const *ptr, const int64_t *off, const double *s_, int threads,         \
                        const double *gm_, const void *gmd_) {                                               \
        const GMT gmv_ = {(T)gm_[1], (T)gm_[2], (T)gm_[3], (T)gm_[4], (T)gm_[5], (T)1, (int)gm_[0]};          \
        CAT(name, CAT(SFX, body_))(n, ptr, off, s_, threads, gmv_, (const T *)gmd_);                         \
    }                                                                                                        \
    static void CAT(name, CAT(SFX, body_))(int64_t n, void *const *ptr, const int64_t *off, const double *s_,   \
                                          int threads, const GMT gmv_, __attribute__((unused)) const T *gmd_)
#define GM_PARAM , const GMT gmk
#define GM_ARG , gmk
#define GM_PIECE_DECL                                                                                        \
    GMT gmk __attribute__((unused)) = gmv_;                                                                  \
    if (gmk.flags & 4) gmk.d = gmd_[k];
#define SQRT sqrtf
#define FABS fabsf
#ifdef SLOTOPT_HAS_RSQRT_ESTIMATE
#define TF_RSQRT(x, i, len, row) tf_rsqrt_f32_at_((x), (i), (len), (row))
#endif
#define T float
#define E float
#define GMT gm_f32_
#define GM_DT f32
#define GM_CLAMP gm_clamp_f32_
#define GM_ANY gm_any_f32_
#include "gradient_forms.inc"
#undef GM_DT
#undef GM_CLAMP
#undef GM_ANY
#undef T
#undef E
#undef GMT
#undef SQRT
#undef FABS
#undef TF_RSQRT
#define SQRT sqrt
#define FABS fabs
#define T double
#define E double
#define GMT gm_f64_
#define GM_DT f64
#define GM_CLAMP gm_clamp_f64_
#define GM_ANY gm_any_f64_
#include "gradient_forms.inc"
#undef GM_DT
#undef GM_CLAMP
#undef GM_ANY
#undef T
#undef E
#undef GMT
#undef SQRT
#undef FABS
#undef RULE
#undef GM_PARAM
#undef GM_ARG
#undef GM_PIECE_DECL
#define RULE(name) void CAT(name, SFX)(int64_t n, void *const *ptr, const int64_t *off, const double *s_, \
                                       int threads)
#define LG(p, i) LD((p)[i])
#define GM_PARAM
#define GM_ARG
#define GM_PIECE_DECL
#undef LD
#undef ST
#undef R
#undef SF
#undef SH

/* float16 and bfloat16: torch's CPU kernels load each element to float32, compute ONE op in float32 and round
 * its result to the half type (round to nearest even) when storing it; the next op starts from the rounded
 * value. R() is that rounding, kept in float. A Python scalar enters an op either as float32 (SF) or rounded
 * to the half type through float32 (SH), depending on the op (rules.inc). */
#define T float
#define SQRT sqrtf
#define FABS fabsf
#define SF(x) ((float)(x))
#define SH(x) R((float)(x))

/* A float32's bits and back (memcpy: the defined way to reinterpret; compiles to a register move). */
static inline uint32_t f32_bits_(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static inline float f32_from_bits_(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* bfloat16 is the upper half of a float32: round to nearest even by adding 0x7fff plus the lowest kept bit,
 * then truncate. A NaN is quieted instead (the carry could otherwise turn a NaN with a low payload into inf).
 * Written without branches so that loops vectorize. */
static inline uint32_t bf16_bits_(float x) {
    const uint32_t u = f32_bits_(x);
    const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
    return ((u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) : rounded) >> 16;
}
static inline float bf16_float_(uint32_t bits) { return f32_from_bits_(bits << 16); }
#define E uint16_t
#define SFX bf16
#define LD(x) bf16_float_(x)
#define ST(x) ((uint16_t)bf16_bits_(x))
#define R(x) bf16_float_(bf16_bits_(x))
#include "rules.inc"
#undef E
#undef SFX
#undef LD
#undef ST
#undef R

/* float16 in software as well, with integer operations that vectorize. (GCC 12's _Float16 is not an option: with
 * -march=native on an AVX512-FP16 machine its SLP vectorizer drops the float -> _Float16 -> float rounding of
 * the scalars, silently giving float32 results.) Round to nearest even: results of 2^-14 and up drop 13 bits
 * like bfloat16 (a carry into the exponent is the right result); smaller ones are multiples of 2^-24, rounded
 * by a float addition to 0.75, whose binade [0.5, 1) has that spacing; 65520 and up overflow to inf; NaN stays
 * NaN. Every floating-point operation is done for every element and only integers are selected, so that GCC
 * if-converts and vectorizes the loops (it does not speculate an FP operation it sees in a branch). */
static inline float f16_round_(float x) {
    const uint32_t u = f32_bits_(x), a = u & 0x7fffffffu;
    const uint32_t tiny = f32_bits_((fabsf(x) + 0.75f) - 0.75f);
    uint32_t r = a < 0x38800000u ? tiny : (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u;
    r = a >= 0x477ff000u ? 0x7f800000u : r;
    r = a > 0x7f800000u ? a | 0x00400000u : r;
    return f32_from_bits_(r | (u & 0x80000000u));
}
static inline uint32_t f16_bits_(float x) { /* rounds as f16_round_, then encodes */
    const uint32_t u = f32_bits_(x), a = u & 0x7fffffffu;
    const uint32_t tiny = f32_bits_(fabsf(x) + 0.75f) - 0x3f400000u; /* k * 2^-24, up to k = 0x400 = 2^-14 */
    uint32_t h = a < 0x38800000u ? tiny : (a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13;
    h = a >= 0x477ff000u ? 0x7c00u : h;
    h = a > 0x7f800000u ? 0x7e00u | ((a >> 13) & 0x1ffu) : h;
    return h | ((u >> 16) & 0x8000u);
}
static inline float f16_float_(uint32_t h) {
    const uint32_t em = h & 0x7fffu;
    const uint32_t tiny = f32_bits_(f32_from_bits_(0x38800000u | (em << 13)) - 0x1p-14f); /* exact */
    uint32_t u = em >= 0x7c00u ? (em << 13) | 0x7f800000u : (em << 13) + 0x38000000u;
    u = em < 0x400u ? tiny : u;
    return f32_from_bits_(u | (h & 0x8000u) << 16);
}
#define E uint16_t
#define SFX f16
#define LD(x) f16_float_(x)
#define ST(x) ((uint16_t)f16_bits_(x))
#define R(x) f16_round_(x)
#include "rules.inc"

/* Whether an element of the len elements at p (unsigned integers of type T: the bits of floats) has every bit of
 * m set; one function per element size, each a loop the compiler vectorizes. */
#define ANY_ALL_ONES_(T)                                                                                       \
    static inline int any_all_ones_##T(const void *p, int64_t len, T m) {                                    \
        const T *x = (const T *)p;                                                                         \
        T any = 0;                                                                                         \
        for (int64_t i = 0; i < len; ++i) any |= (T)((x[i] & m) == m);                                     \
        return any != 0;                                                                                   \
    }
ANY_ALL_ONES_(uint16_t)
ANY_ALL_ONES_(uint32_t)
ANY_ALL_ONES_(uint64_t)
#undef ANY_ALL_ONES_

/* Loss scaling (slotopt/engine/loss_scaling.py): the index of the first tensor of a group holding an inf or a
 * NaN, or -1. It reads bits only (an exponent field of all ones: `(x & mask) == mask`), so no floating-point
 * operation runs and the answer is exact under any rounding or denormal mode; no write, one read of each
 * element. `ptr[k]` is tensor k's data, `off` the n + 1 prefix sums of the element counts, `bytes` the element
 * size (2, 4 or 8) and `mask` the dtype's exponent field; over MIN_PARALLEL_ELEMENTS elements, `threads` threads
 * share the tensors. */
int64_t slotopt_first_nonfinite(int64_t n, const void *const *ptr, const int64_t *off, int64_t bytes,
                                uint64_t mask, int threads) {
    if (bytes != 2 && bytes != 4 && bytes != 8) return -2; /* not an element size this check knows */
    const int64_t total = off[n];
    const int threads_ = (total < MIN_PARALLEL_ELEMENTS || threads < 1) ? 1 : threads;
    int64_t first = n; /* the first tensor found so far (n: none) */
    /* Each thread takes the tensors whose first element falls in its share of the elements, and stops at the first
     * it finds; the answer is the least index any thread found. */
    _Pragma("omp parallel num_threads(threads_)")
    {
        const int64_t nth = THREAD_COUNT(), tid = THREAD_ID();
        const int64_t lo = total * tid / nth, hi = total * (tid + 1) / nth;
        int64_t k = first_at_least_(off, n, lo);
        const int64_t end = tid + 1 < nth ? first_at_least_(off, n, hi) : n;
        for (; k < end; ++k) {
            const int64_t len = off[k + 1] - off[k];
            if (k + 1 < end) { /* the next tensor's first lines, read while this one is (see PREFETCH_NEXT) */
                const char *next = (const char *)ptr[k + 1];
                const int64_t next_bytes = (off[k + 2] - off[k + 1]) * bytes;
                for (int64_t b = 0; b < next_bytes && b < 1024; b += 64) __builtin_prefetch(next + b, 0, 3);
            }
            const int found = bytes == 4   ? any_all_ones_uint32_t(ptr[k], len, (uint32_t)mask)
                              : bytes == 8 ? any_all_ones_uint64_t(ptr[k], len, mask)
                                           : any_all_ones_uint16_t(ptr[k], len, (uint16_t)mask);
            if (found) {
                _Pragma("omp critical(slotopt_first_nonfinite)")
                if (k < first) first = k;
                break;
            }
        }
    }
    return first == n ? -1 : first;
}

/* Loss scaling's unscale on an ordinary step (slotopt/engine/loss_scaling.py), in one pass over a group: element i
 * of tensor k (data ptr[k], off the n + 1 prefix sums of the element counts) is read where it is, tested for inf
 * or NaN on its bits (as slotopt_first_nonfinite: the scaled gradient, before the division) and written as
 * x / scale to out[off[k] + i], out being of the unscaled dtype, promote_types(dtype, float32): float32 for
 * float32, float16 and bfloat16 inputs, float64 for float64 ones. That is torch's
 * `flat.to(promote_types(dtype, float32)) / scale`, bit for bit: a half converts to float32 exactly (float16
 * subnormals are float32 normals; a bfloat16 subnormal stays a float32 subnormal, which the division then reads
 * as zero under denormals-are-zero, as torch's does), and the division is IEEE's correctly rounded one in the
 * output dtype (no reciprocal: -ffp-contract=off, no fast-math), under the caller's flush-to-zero mode (the
 * worker threads take it, GROUP_LOOP). `scale` arrives as a double: exact for a float32 scale, and a float32
 * output divides by it rounded to float32, as torch casts a 0-d divisor to the tensor's dtype. `dtype`: 0
 * float32, 1 float64, 2 float16, 3 bfloat16. Returns 1 when an input element is inf or NaN (`out` is then
 * partly written), 0 when every element is finite, -2 for a dtype code it does not know. */
#define UNSCALE_PASS_(IN, MASK, LOAD, OUT, DIVISOR)                                                           \
    GROUP_LOOP(                                                                                            \
        const IN *x_ = (const IN *)ptr[k];                                                                 \
        OUT *y_ = (OUT *)out + off[k];                                                                     \
        IN any_ = 0;                                                                                       \
        for (int64_t i = s; i < e; ++i) {                                                                  \
            const IN bits_ = x_[i];                                                                        \
            any_ |= (IN)((bits_ & (MASK)) == (MASK));                                                      \
            y_[i] = LOAD(bits_) / (DIVISOR);                                                               \
        }                                                                                                  \
        if (any_) __atomic_store_n(&found, 1, __ATOMIC_RELAXED);                                           \
    )

static inline double f64_from_bits_(uint64_t bits) {
    double x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

int64_t slotopt_unscale(int64_t n, const void *const *ptr, const int64_t *off, int64_t dtype, void *out,
                        double scale, int threads) {
    int found = 0;
    const float scale_f32 = (float)scale;
    switch (dtype) {
    case 0: UNSCALE_PASS_(uint32_t, 0x7f800000u, f32_from_bits_, float, scale_f32); break;
    case 1: UNSCALE_PASS_(uint64_t, 0x7ff0000000000000ull, f64_from_bits_, double, scale); break;
    case 2: UNSCALE_PASS_(uint16_t, 0x7c00u, f16_float_, float, scale_f32); break;
    case 3: UNSCALE_PASS_(uint16_t, 0x7f80u, bf16_float_, float, scale_f32); break;
    default: return -2;
    }
    return __atomic_load_n(&found, __ATOMIC_RELAXED);
}

/* The step's gradient maps (clipping by norm in TensorFlow's order, unscale, clipvalue): gradient_maps.inc. */
#define GM_T float
#define GM_W 8
#define GM_SFX f32
#include "gradient_maps.inc"
#undef GM_T
#undef GM_W
#undef GM_SFX
#define GM_T double
#define GM_W 4
#define GM_SFX f64
#include "gradient_maps.inc"
#undef GM_T
#undef GM_W
#undef GM_SFX
