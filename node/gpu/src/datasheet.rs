//! Data-sheet peaks the GEMM probe is compared against.

/// Dense int8 tensor operations per second from NVIDIA's data sheets, by device name.
pub fn int8_dense_peak(name: &str) -> Option<f64> {
    let name = name.to_ascii_uppercase();
    let tops = if name.contains("H200") {
        1979.0
    } else if name.contains("H100") && name.contains("PCIE") {
        1513.0
    } else if name.contains("H100") && name.contains("NVL") {
        1671.0
    } else if name.contains("H100") {
        1979.0
    } else if name.contains("A100") {
        624.0
    } else {
        return None;
    };
    Some(tops * 1e12)
}
