// FIPS 180-4 SHA-256: the emulated runtime finds a code object's emulated
// twin by the same digest build.py records in the manifest.
#pragma once
#include <stddef.h>
void hx_sha256_hex(const void* data, size_t n, char out[65]);
