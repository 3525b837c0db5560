//! With the `host-kernels` feature, compiles the kernel sources as host C++ (kernels/host.cpp)
//! for the parity tests.

fn main() {
    println!("cargo:rerun-if-changed=kernels");
    #[cfg(feature = "host-kernels")]
    cc::Build::new()
        .cpp(true)
        .flag("-std=c++14")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .file("kernels/host.cpp")
        .compile("ocelli_host_kernels");
}
