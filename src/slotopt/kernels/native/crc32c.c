/* CRC-32C (Castagnoli), the checksum of TensorFlow checkpoints and LevelDB tables, for slotopt.io.crc32c.

   A plain shared library loaded with ctypes (no Python C API), apart from the update kernels so that a reader
   never depends on their build. Two ways to the same value:
   - the SSE4.2 `crc32` instruction, chosen at run time where the processor has it (x86-64): eight bytes per
     instruction, three independent streams per block so that the instruction's latency is hidden, the streams
     joined by the "advance over n zero bytes" operator of the CRC register (a CRC is linear over GF(2));
   - slicing-by-8 tables elsewhere (eight bytes per step, about 1 GB/s).
   slotopt_crc32c_extend(crc, data, n) continues the CRC `crc` (the value of the bytes so far; 0 for none) over
   n more bytes, so a reader checks each chunk as it lands in its tensor, not in a second pass. */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define POLY 0x82F63B78u /* Castagnoli, reflected */

static uint32_t table[8][256];

__attribute__((constructor)) static void make_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++) table[k][n] = (table[k - 1][n] >> 8) ^ table[0][table[k - 1][n] & 0xFF];
}

static uint32_t by_table(uint32_t state, const unsigned char *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        state = table[0][(state ^ *p++) & 0xFF] ^ (state >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8); /* little-endian hosts only: see slotopt_crc32c_little_endian */
        word ^= state;
        state = table[7][word & 0xFF] ^ table[6][(word >> 8) & 0xFF] ^ table[5][(word >> 16) & 0xFF] ^
                table[4][(word >> 24) & 0xFF] ^ table[3][(word >> 32) & 0xFF] ^ table[2][(word >> 40) & 0xFF] ^
                table[1][(word >> 48) & 0xFF] ^ table[0][word >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) state = table[0][(state ^ *p++) & 0xFF] ^ (state >> 8);
    return state;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_SSE42_PATH 1

/* Advancing the register over BLOCK zero bytes is a linear map: four byte tables of it (made once). */
#define BLOCK 8192
static uint32_t shift_block[4][256];

static uint32_t zeros_by_table(uint32_t state, size_t n) {
    while (n--) state = table[0][state & 0xFF] ^ (state >> 8);
    return state;
}

__attribute__((constructor)) static void make_shift(void) {
    make_tables(); /* constructors run in an unspecified order: the tables first (idempotent) */
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++) shift_block[k][b] = zeros_by_table(b << (8 * k), BLOCK);
}

static inline uint32_t shift(uint32_t s) {
    return shift_block[0][s & 0xFF] ^ shift_block[1][(s >> 8) & 0xFF] ^ shift_block[2][(s >> 16) & 0xFF] ^
           shift_block[3][s >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t by_instruction(uint32_t state, const unsigned char *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        state = _mm_crc32_u8(state, *p++);
        n--;
    }
    /* Three streams of BLOCK bytes each: a = f(state, A), b = f(0, B), c = f(0, C), then
       f(state, ABC) = shift(shift(a) ^ b) ^ c. */
    while (n >= 3 * BLOCK) {
        uint64_t a = state, b = 0, c = 0;
        const unsigned char *pb = p + BLOCK, *pc = p + 2 * BLOCK;
        for (size_t i = 0; i < BLOCK; i += 8) {
            uint64_t wa, wb, wc;
            memcpy(&wa, p + i, 8);
            memcpy(&wb, pb + i, 8);
            memcpy(&wc, pc + i, 8);
            a = _mm_crc32_u64(a, wa);
            b = _mm_crc32_u64(b, wb);
            c = _mm_crc32_u64(c, wc);
        }
        state = shift(shift((uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)c;
        p += 3 * BLOCK;
        n -= 3 * BLOCK;
    }
    uint64_t s = state;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        s = _mm_crc32_u64(s, w);
        p += 8;
        n -= 8;
    }
    state = (uint32_t)s;
    while (n--) state = _mm_crc32_u8(state, *p++);
    return state;
}
#endif

static int use_instruction = -1;

int slotopt_crc32c_hardware(void) {
#ifdef HAVE_SSE42_PATH
    if (use_instruction < 0) {
        __builtin_cpu_init();
        use_instruction = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    }
    return use_instruction;
#else
    return 0;
#endif
}

int slotopt_crc32c_little_endian(void) {
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

/* The CRC of (bytes so far) + data[0:n], given `crc`, the CRC of the bytes so far. */
uint32_t slotopt_crc32c_extend(uint32_t crc, const void *data, size_t n) {
    uint32_t state = ~crc;
#ifdef HAVE_SSE42_PATH
    if (slotopt_crc32c_hardware()) return ~by_instruction(state, (const unsigned char *)data, n);
#endif
    return ~by_table(state, (const unsigned char *)data, n);
}

/* The same value by the tables alone (tests compare the two paths). */
uint32_t slotopt_crc32c_extend_table(uint32_t crc, const void *data, size_t n) {
    return ~by_table(~crc, (const unsigned char *)data, n);
}
