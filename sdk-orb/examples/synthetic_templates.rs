//! Writes a synthetic person as two open-iris template files, `left.json` and `right.json`:
//! uniformly random codes with 15 percent of the (real, imaginary) pairs masked.
//!
//! Usage: `synthetic_templates SEED OUT_DIR`. The same seed gives the same files.

use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use sdk_orb::template;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [seed, dir] = args.as_slice() else {
        eprintln!("usage: synthetic_templates SEED OUT_DIR");
        std::process::exit(2);
    };
    let Ok(seed) = seed.parse::<u64>() else {
        eprintln!("SEED must be an unsigned integer");
        std::process::exit(2);
    };
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    for eye in ["left", "right"] {
        let t = template::random(&mut rng, 0.15);
        let mut json = vec![0u8; t.json_len()];
        let n = t.to_open_iris_json(&mut json).expect("sized by json_len");
        let path = std::path::Path::new(dir).join(format!("{eye}.json"));
        if let Err(e) = std::fs::write(&path, &json[..n]) {
            eprintln!("{}: {e}", path.display());
            std::process::exit(1);
        }
        println!("{}: {} usable bits", path.display(), t.usable_bits());
    }
}
