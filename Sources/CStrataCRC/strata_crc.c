#include "strata_crc.h"

#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>

int strata_crc32c_hardware_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
}

__attribute__((target("sse4.2")))
uint32_t strata_crc32c_hardware(uint32_t crc, const void *data, size_t length) {
    const unsigned char *p = (const unsigned char *)data;
    uint64_t c = crc;
    while (length >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);  /* unaligned load */
        c = _mm_crc32_u64(c, word);
        p += 8;
        length -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (length > 0) {
        c32 = _mm_crc32_u8(c32, *p);
        p += 1;
        length -= 1;
    }
    return c32;
}

#else

int strata_crc32c_hardware_available(void) { return 0; }

uint32_t strata_crc32c_hardware(uint32_t crc, const void *data, size_t length) {
    (void)data;
    (void)length;
    return crc;  /* never called: the Swift side checks availability first */
}

#endif
