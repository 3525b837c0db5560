// u16 dot products mod 2^16 from the cuBLAS int8 GEMMs (src/engine/split.rs derives the
// formula): `ll` and `cross` are column-major `m_pad x n` (entry (d, q) at q * m_pad + d), the
// layout cuBLAS writes for DB^T * Q; `out` is row-major `n x m`, the engine's output layout.
KERNEL combine(
    const int* __restrict__ ll,
    const int* __restrict__ cross,
    const u16* __restrict__ c_db,
    const u16* __restrict__ c_query,
    u16* __restrict__ out,
    u32 m,
    u32 m_pad,
    u32 n,
    u32 length_term)
{
    u32 d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= m) return;
    for (u32 q = blockIdx.y; q < n; q += gridDim.y) {
        u64 i = (u64)q * m_pad + d;
        u32 v = (u32)ll[i] + ((u32)cross[i] << 8) + c_db[d] + c_query[q] + length_term;
        out[(u64)q * m + d] = (u16)v;
    }
}
