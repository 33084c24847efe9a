#ifndef STRATA_CRC_H
#define STRATA_CRC_H

#include <stddef.h>
#include <stdint.h>

/// 1 when this CPU has the SSE4.2 `crc32` instruction (x86-64), else 0.
int strata_crc32c_hardware_available(void);

/// CRC-32C (Castagnoli) of `length` bytes at `data`, continuing from the running value `crc`
/// (start with 0xFFFFFFFF, finish by inverting). Only call when
/// `strata_crc32c_hardware_available()` returned 1.
uint32_t strata_crc32c_hardware(uint32_t crc, const void *data, size_t length);

#endif
