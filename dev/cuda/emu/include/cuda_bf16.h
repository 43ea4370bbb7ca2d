// emulated bf16: storage type plus the two conversions the trainer uses (round to nearest even)
#pragma once
#include "emu.h"
struct __nv_bfloat16 {
    unsigned short __x;
};
inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u) b.__x = 0x7fff;  // NaN
    else b.__x = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return b;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t u = (uint32_t)b.__x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
