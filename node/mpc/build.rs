//! With the `host-kernels` feature, compiles the kernel sources as host C++ (kernels/host.cpp)
//! for the parity tests; with `c-matcher`, the plain C popcount matcher `bench` compares the
//! plaintext baseline against (bench-support/plaintext.c).

fn main() {
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-changed=bench-support");
    #[cfg(feature = "host-kernels")]
    cc::Build::new()
        .cpp(true)
        .flag("-std=c++14")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .file("kernels/host.cpp")
        .compile("ocelli_host_kernels");
    #[cfg(feature = "c-matcher")]
    {
        let mut build = cc::Build::new();
        build
            .opt_level(3)
            .warnings(true)
            .extra_warnings(true)
            .warnings_into_errors(true)
            .file("bench-support/plaintext.c");
        // Native only where the build host is the target; the matcher checks at run time
        // that the core has what the compiler used.
        if std::env::var("HOST") == std::env::var("TARGET") {
            build.flag_if_supported("-march=native");
        }
        build.compile("ocelli_plain_matcher");
    }
}
