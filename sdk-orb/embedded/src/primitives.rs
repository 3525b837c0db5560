//! Firmware image that counts the instructions of the version 2 seal's public-key operations
//! one by one, as the X-Wing crate calls them: a whole X-Wing encapsulation, then its parts,
//! ML-KEM-768's encapsulation, the ephemeral X25519 key (from the basepoint table) and the
//! X25519 shared secret. Prints `primitive <name> instructions: N` and `... stack bytes: N`. An image of its own, so
//! the seal images' inlining stays theirs.
#![no_std]
#![no_main]

mod measure;
mod runtime;

use core::hint::black_box;

use cortex_m_rt::entry;
use cortex_m_semihosting::hprintln;
use sdk_orb::keys::NodeHybridSecretKey;

use runtime::exit;

/// Bytes of the ML-KEM-768 half of an X-Wing public key; the X25519 half follows.
const MLKEM_KEY_BYTES: usize = 1184;

#[entry]
fn main() -> ! {
    let key = NodeHybridSecretKey::from_seed(&[1; 32])
        .public_key()
        .to_bytes();
    let counter = measure::Counter::start();
    let report = |name: &str, n: u64| {
        hprintln!("primitive {} instructions: {}", name, n);
        hprintln!("primitive {} stack bytes: {}", name, counter.last_stack());
    };

    let Ok(xwing) = x_wing::EncapsulationKey::try_from(&key[..]) else {
        exit(false)
    };
    let (out, n) = counter.count(|| xwing.encapsulate_deterministic(&[5; 64].into()));
    black_box(out);
    report("xwing-encapsulation", n);

    let Ok(mlkem_key) = ml_kem::array::Array::try_from(&key[..MLKEM_KEY_BYTES]) else {
        exit(false)
    };
    let Ok(mlkem) = ml_kem::EncapsulationKey768::new(&mlkem_key) else {
        exit(false)
    };
    let (out, n) = counter.count(|| mlkem.encapsulate_deterministic(&[6; 32].into()));
    black_box(out);
    report("mlkem768-encapsulation", n);

    let Ok(x_bytes) = <[u8; 32]>::try_from(&key[MLKEM_KEY_BYTES..]) else {
        exit(false)
    };
    let node = x25519_dalek::PublicKey::from(x_bytes);
    let ephemeral = x25519_dalek::StaticSecret::from([7; 32]);
    let (public, n) = counter.count(|| x25519_dalek::PublicKey::from(&ephemeral));
    black_box(public);
    report("x25519-ephemeral-key", n);
    let (shared, n) = counter.count(|| ephemeral.diffie_hellman(&node));
    black_box(shared.as_bytes());
    report("x25519-shared-secret", n);
    exit(true)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    hprintln!("panic: {}", info);
    exit(false)
}
