// Reading GGUF blocks byte for byte from a buffer of 32-bit words, so weights are uploaded
// exactly as the file stores them (blocks of 17, 18 or 34 bytes are not word-aligned) and no
// 8- or 16-bit storage feature is needed. `words` is the buffer's array, declared by the shader.

uint byte_at(uint offset)
{
    return (words[offset >> 2] >> ((offset & 3u) * 8u)) & 0xffu;
}

// A little-endian 16-bit value at an even offset (never straddles a word).
uint u16_at(uint offset)
{
    return (words[offset >> 2] >> ((offset & 2u) * 8u)) & 0xffffu;
}

float fp16_at(uint offset)
{
    return unpackHalf2x16(u16_at(offset)).x;
}

// Four bytes at any offset, the first in the low byte.
uint u32_at(uint offset)
{
    const uint shift = (offset & 3u) * 8u;
    const uint low = words[offset >> 2];
    if (shift == 0u) {
        return low;
    }
    return (low >> shift) | (words[(offset >> 2) + 1u] << (32u - shift));
}
