//! With `c-matcher`, compiles the plain C popcount matcher `bench` compares the plaintext
//! baseline against (bench-support/plaintext.c).

fn main() {
    println!("cargo:rerun-if-changed=bench-support");
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
