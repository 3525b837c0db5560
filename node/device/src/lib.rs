//! The comparison phase on a kernel device: the local steps run as the kernels in
//! `node/device/kernels/`, on a GPU (the GPU backend's devices, `ocelli_gpu::CudaKernels`)
//! or on the host through the compatibility header that maps the grid onto
//! loops (feature `host-kernels`, what the parity tests run). Only the per-round messages
//! leave the device: each is downloaded, sent by the [`Session`], and the received one
//! uploaded.
//!
//! The device draws the pairwise streams itself (the `chacha12` kernel) at the positions the
//! session's [`ocelli_mpc::CorrelatedRandomness`] has reached, and moves those streams past what
//! it drew, so every value and message equals the host path's bit for bit.

#![deny(missing_docs, clippy::unwrap_used)]

#[cfg(feature = "host-kernels")]
#[allow(unsafe_code)]
pub mod host;
pub mod split;

use std::sync::Arc;

use sdk_orb::PartyId;

use ocelli_mpc::binary::{carry_into, plane};
use ocelli_mpc::bits::words_for;
use ocelli_mpc::circuit::{Circuit, SharedBits};
use ocelli_mpc::network::{NetworkError, Peer, Transport};
use ocelli_mpc::randomness::Neighbour;
use ocelli_mpc::session::Session;
use ocelli_mpc::share::Word;
use zerocopy::IntoBytes;

/// The kernel sources as NVRTC compiles them: the CUDA prelude, then every kernel file.
pub const KERNELS_CU: &str = concat!(
    include_str!("../kernels/device.h"),
    include_str!("../kernels/dot.cu"),
    include_str!("../kernels/compare.cu"),
);

/// Every kernel's entry point in [`KERNELS_CU`].
pub const KERNEL_NAMES: &[&str] = &[
    "combine",
    "chacha12",
    "add_u16",
    "cross_term",
    "x_part",
    "to_planes",
    "and_gate",
    "xor_words",
    "and_words",
    "copy_words",
    "gather_bits",
];

/// Threads per block of every launch here.
const BLOCK: u32 = 256;

/// Bits of the lifted value `x` ([`ocelli_mpc::compare`]).
const X_BITS: usize = 32;

/// One kernel argument: a place in a device allocation or a scalar. A buffer travels as the
/// allocation itself, not as its address, so that the device resolves the address at the
/// launch and holds, until the launch is queued, whatever orders the launch after the
/// allocation's earlier uses (cudarc's guards record stream events on it).
pub enum Arg<'a, B> {
    /// Byte `.1` of the allocation `.0`.
    Buf(&'a B, usize),
    /// An absent buffer: address 0.
    Null,
    /// A 32-bit scalar.
    U32(u32),
    /// A 64-bit scalar.
    U64(u64),
}

impl<B> Clone for Arg<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B> Copy for Arg<'_, B> {}

impl<B> core::fmt::Debug for Arg<'_, B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Arg::Buf(_, offset) => write!(f, "Buf(+{offset})"),
            Arg::Null => f.write_str("Null"),
            Arg::U32(v) => write!(f, "U32({v})"),
            Arg::U64(v) => write!(f, "U64({v})"),
        }
    }
}

/// Where kernels run: device memory and launches. A failing device ends the batch: these
/// panic, as the GPU engine does, and the node reports the batch failed.
pub trait KernelDevice: Send + Sync + 'static {
    /// A device allocation.
    type Buf: Send + Sync + 'static;
    /// `bytes` zeroed bytes.
    fn alloc_zeroed(&self, bytes: usize) -> Self::Buf;
    /// A copy of `bytes` on the device.
    fn upload(&self, bytes: &[u8]) -> Self::Buf;
    /// Copies `out.len()` bytes from `offset` in `buf` to `out`, after every launch before.
    fn download(&self, buf: &Self::Buf, offset: usize, out: &mut [u8]);
    /// Runs `kernel` on a `grid` of blocks of `block` threads.
    fn launch(
        &self,
        kernel: &'static str,
        grid: (u32, u32),
        block: u32,
        args: &[Arg<'_, Self::Buf>],
    );
}

/// Runs `kernel` with at least `threads` threads, in blocks of [`BLOCK`]; none for zero.
fn launch<D: KernelDevice>(
    dev: &D,
    kernel: &'static str,
    threads: usize,
    args: &[Arg<'_, D::Buf>],
) {
    if threads == 0 {
        return;
    }
    let grid = u32::try_from(threads.div_ceil(BLOCK as usize)).expect("fewer than 2^32 blocks");
    dev.launch(kernel, (grid, 1), BLOCK, args);
}

/// A byte range of a device allocation.
pub struct DeviceVec<D: KernelDevice> {
    dev: Arc<D>,
    buf: Arc<D::Buf>,
    offset: usize,
    bytes: usize,
}

impl<D: KernelDevice> Clone for DeviceVec<D> {
    fn clone(&self) -> Self {
        DeviceVec {
            dev: self.dev.clone(),
            buf: self.buf.clone(),
            offset: self.offset,
            bytes: self.bytes,
        }
    }
}

impl<D: KernelDevice> core::fmt::Debug for DeviceVec<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DeviceVec")
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

impl<D: KernelDevice> DeviceVec<D> {
    /// `bytes` zeroed bytes.
    pub fn zeroed(dev: &Arc<D>, bytes: usize) -> DeviceVec<D> {
        // Never a zero-sized allocation: some drivers refuse one.
        let buf = dev.alloc_zeroed(bytes.max(8));
        DeviceVec {
            dev: dev.clone(),
            buf: Arc::new(buf),
            offset: 0,
            bytes,
        }
    }

    /// A copy of `values` on the device, each word little-endian as the kernels read it.
    fn from_words<T: Word>(dev: &Arc<D>, values: &[T]) -> DeviceVec<D> {
        let bytes = values.as_bytes();
        let buf = if cfg!(target_endian = "little") && bytes.len() >= 8 {
            dev.upload(bytes)
        } else {
            // Never a zero-sized allocation (see `zeroed`), and words swapped where needed.
            let mut le = zeroize::Zeroizing::new(ocelli_mpc::share::encode(values));
            le.resize(bytes.len().max(8), 0);
            dev.upload(&le)
        };
        DeviceVec {
            dev: dev.clone(),
            buf: Arc::new(buf),
            offset: 0,
            bytes: bytes.len(),
        }
    }

    /// A copy of little-endian words on the device: a message as it came off the wire.
    fn from_le_bytes(dev: &Arc<D>, bytes: &[u8]) -> DeviceVec<D> {
        let buf = if bytes.len() >= 8 {
            dev.upload(bytes)
        } else {
            // Never a zero-sized allocation (see `zeroed`).
            let mut padded = [0u8; 8];
            padded[..bytes.len()].copy_from_slice(bytes);
            dev.upload(&padded)
        };
        DeviceVec {
            dev: dev.clone(),
            buf: Arc::new(buf),
            offset: 0,
            bytes: bytes.len(),
        }
    }

    /// The contents as they go on the wire (the device's words are little-endian), into
    /// `out`, which is resized to fit.
    fn download_into(&self, out: &mut Vec<u8>) {
        // A buffer kept from an earlier message is cut or grown, never made afresh: a fresh
        // one of a pass's size costs more in page faults than the copy itself.
        out.resize(self.bytes, 0);
        if self.bytes > 0 {
            self.dev.download(&self.buf, self.offset, out);
        }
    }

    /// A copy of `values` on the device.
    pub fn from_u16(dev: &Arc<D>, values: &[u16]) -> DeviceVec<D> {
        Self::from_words(dev, values)
    }

    /// A copy of `values` on the device.
    pub fn from_u64(dev: &Arc<D>, values: &[u64]) -> DeviceVec<D> {
        Self::from_words(dev, values)
    }

    fn from_u32(dev: &Arc<D>, values: &[u32]) -> DeviceVec<D> {
        Self::from_words(dev, values)
    }

    fn arg(&self) -> Arg<'_, D::Buf> {
        Arg::Buf(&*self.buf, self.offset)
    }

    /// `v`'s argument, or a null address for none.
    fn arg_or_null(v: Option<&DeviceVec<D>>) -> Arg<'_, D::Buf> {
        v.map_or(Arg::Null, DeviceVec::arg)
    }

    /// Bytes `range` of this one, sharing the allocation.
    pub fn view(&self, range: core::ops::Range<usize>) -> DeviceVec<D> {
        assert!(range.start <= range.end && range.end <= self.bytes);
        DeviceVec {
            dev: self.dev.clone(),
            buf: self.buf.clone(),
            offset: self.offset + range.start,
            bytes: range.end - range.start,
        }
    }

    /// The contents as words, copied from the device straight into them.
    fn to_words<T: Word>(&self) -> Vec<T> {
        assert!(
            self.bytes.is_multiple_of(T::BYTES),
            "a whole number of words"
        );
        let mut out = vec![T::default(); self.bytes / T::BYTES];
        if self.bytes > 0 {
            let bytes = out.as_mut_bytes();
            self.dev.download(&self.buf, self.offset, bytes);
            ocelli_mpc::share::swap_to_le::<T>(bytes);
        }
        out
    }

    /// The contents as u16.
    pub fn to_u16(&self) -> Vec<u16> {
        self.to_words()
    }

    /// The contents as u32.
    pub fn to_u32(&self) -> Vec<u32> {
        self.to_words()
    }

    /// The contents as u64.
    pub fn to_u64(&self) -> Vec<u64> {
        self.to_words()
    }
}

/// A party's replicated share of a bit-sliced vector in device memory.
pub struct DeviceBits<D: KernelDevice> {
    /// This party's component.
    pub own: DeviceVec<D>,
    /// The previous party's component.
    pub prev: DeviceVec<D>,
    words: usize,
}

impl<D: KernelDevice> Clone for DeviceBits<D> {
    fn clone(&self) -> Self {
        DeviceBits {
            own: self.own.clone(),
            prev: self.prev.clone(),
            words: self.words,
        }
    }
}

impl<D: KernelDevice> core::fmt::Debug for DeviceBits<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DeviceBits")
            .field("words", &self.words)
            .finish_non_exhaustive()
    }
}

impl<D: KernelDevice> DeviceBits<D> {
    fn new(own: DeviceVec<D>, prev: DeviceVec<D>) -> DeviceBits<D> {
        assert_eq!(own.bytes, prev.bytes);
        let words = own.bytes / 8;
        DeviceBits { own, prev, words }
    }

    fn zeroed(dev: &Arc<D>, words: usize) -> DeviceBits<D> {
        DeviceBits::new(
            DeviceVec::zeroed(dev, 8 * words),
            DeviceVec::zeroed(dev, 8 * words),
        )
    }

    fn dev(&self) -> &Arc<D> {
        &self.own.dev
    }

    /// Both components, downloaded (for tests and the conformance replay).
    pub fn to_replicated(&self) -> ocelli_mpc::share::Replicated<u64> {
        ocelli_mpc::share::Replicated::new(self.own.to_u64(), self.prev.to_u64())
    }
}

fn words_arg<B>(n: usize) -> Arg<'static, B> {
    Arg::U64(n as u64)
}

/// `x ^ y` over `words` words, in a new allocation.
fn xor_vec<D: KernelDevice>(x: &DeviceVec<D>, y: &DeviceVec<D>, words: usize) -> DeviceVec<D> {
    let out = DeviceVec::zeroed(&x.dev, 8 * words);
    let args = [out.arg(), x.arg(), y.arg(), words_arg(words)];
    launch(&*x.dev, "xor_words", words, &args);
    out
}

impl<D: KernelDevice> SharedBits for DeviceBits<D> {
    fn words(&self) -> usize {
        self.words
    }

    fn slice(&self, range: core::ops::Range<usize>) -> Self {
        let bytes = 8 * range.start..8 * range.end;
        DeviceBits::new(self.own.view(bytes.clone()), self.prev.view(bytes))
    }

    fn xor(&self, other: &Self) -> Self {
        assert_eq!(self.words, other.words);
        DeviceBits::new(
            xor_vec(&self.own, &other.own, self.words),
            xor_vec(&self.prev, &other.prev, self.words),
        )
    }

    fn concat(parts: &[&Self]) -> Self {
        let dev = parts[0].dev().clone();
        let total = parts.iter().map(|p| p.words).sum();
        let out = DeviceBits::zeroed(&dev, total);
        let mut at = 0;
        for p in parts {
            let to = out.slice(at..at + p.words);
            for (o, x) in [(&to.own, &p.own), (&to.prev, &p.prev)] {
                let args = [o.arg(), x.arg(), words_arg(p.words)];
                launch(&*dev, "copy_words", p.words, &args);
            }
            at += p.words;
        }
        out
    }

    fn and_public(&self, mask: &[u64]) -> Self {
        assert_eq!(mask.len(), self.words);
        let mask = DeviceVec::from_u64(self.dev(), mask);
        let out = DeviceBits::zeroed(self.dev(), self.words);
        for (o, x) in [(&out.own, &self.own), (&out.prev, &self.prev)] {
            let args = [o.arg(), x.arg(), mask.arg(), words_arg(self.words)];
            launch(&**self.dev(), "and_words", self.words, &args);
        }
        out
    }

    fn gather(&self, positions: &[Option<usize>]) -> Self {
        let picks: Vec<u32> = positions
            .iter()
            .map(|p| {
                p.map_or(u32::MAX, |p| {
                    assert!(p < 64 * self.words, "a position inside the vector");
                    u32::try_from(p).expect("positions below 2^32 - 1")
                })
            })
            .collect();
        let picks = DeviceVec::from_u32(self.dev(), &picks);
        let words = words_for(positions.len());
        let out = DeviceBits::zeroed(self.dev(), words);
        for (o, x) in [(&out.own, &self.own), (&out.prev, &self.prev)] {
            let args = [
                o.arg(),
                x.arg(),
                picks.arg(),
                Arg::U64(positions.len() as u64),
            ];
            launch(&**self.dev(), "gather_bits", words, &args);
        }
        out
    }
}

/// Everything the comparison phase computes on the device for a batch of comparisons, as
/// [`ocelli_mpc::compare::Comparison`] has it on the host.
#[derive(Debug)]
pub struct DeviceComparison<D: KernelDevice> {
    /// This party's part of `cd` after the split.
    pub cd: DeviceVec<D>,
    /// This party's part of `md` after the split.
    pub md: DeviceVec<D>,
    /// This party's part of the cross term `A u v`.
    pub cross: DeviceVec<D>,
    /// This party's part of `x`, u32.
    pub x: DeviceVec<D>,
    /// `MSB(x)`, one replicated bit plane.
    pub matches: DeviceBits<D>,
}

/// A [`Session`] whose comparison-phase values live on a kernel device.
pub struct DeviceCircuit<'c, 's, D: KernelDevice, T: Transport> {
    session: &'c mut Session<'s, T>,
    dev: Arc<D>,
    /// Messages received and uploaded, kept to download the next outgoing ones into: a
    /// party sends about as many bytes as it receives, so after the first round no message
    /// buffer is made afresh.
    spare: Vec<Vec<u8>>,
}

/// Received message buffers a [`DeviceCircuit`] keeps for its outgoing messages.
const SPARE_BUFFERS: usize = 4;

impl<D: KernelDevice, T: Transport> core::fmt::Debug for DeviceCircuit<'_, '_, D, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DeviceCircuit")
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl<'c, 's, D: KernelDevice, T: Transport> DeviceCircuit<'c, 's, D, T> {
    /// Runs the session's comparison phases on `dev`.
    pub fn new(session: &'c mut Session<'s, T>, dev: Arc<D>) -> Self {
        DeviceCircuit {
            session,
            dev,
            spare: Vec::new(),
        }
    }

    /// The session (traffic, party).
    pub fn session(&self) -> &Session<'s, T> {
        self.session
    }

    /// The next `words` u32 words of a stream, drawn on the device.
    fn draw(&mut self, which: Neighbour, words: usize) -> DeviceVec<D> {
        let out = DeviceVec::zeroed(&self.dev, 4 * words);
        let run = self.session.randomness().take_words(which, words as u64);
        if words > 0 {
            let first_block = run.word_pos / 16;
            let last_block = (run.word_pos + words as u64 - 1) / 16;
            let mut args: Vec<Arg<'_, D::Buf>> = run.key.iter().map(|&k| Arg::U32(k)).collect();
            args.extend([Arg::U64(run.word_pos), Arg::U64(words as u64), out.arg()]);
            let blocks = (last_block - first_block + 1) as usize;
            launch(&*self.dev, "chacha12", blocks, &args);
        }
        out
    }

    /// `n` u16 from a stream, as [`ocelli_mpc::CorrelatedRandomness::next_u16`] draws them.
    fn draw_u16(&mut self, which: Neighbour, n: usize) -> DeviceVec<D> {
        self.draw(which, n.div_ceil(2))
    }

    /// `out = x + y + plus - minus` over `n` u16; absent operands are `None`.
    fn add_u16(
        &self,
        n: usize,
        x: &DeviceVec<D>,
        y: Option<&DeviceVec<D>>,
        plus: Option<&DeviceVec<D>>,
        minus: Option<&DeviceVec<D>>,
    ) -> DeviceVec<D> {
        let out = DeviceVec::zeroed(&self.dev, 2 * n);
        let opt = DeviceVec::arg_or_null;
        let args = [
            out.arg(),
            x.arg(),
            opt(y),
            opt(plus),
            opt(minus),
            Arg::U64(n as u64),
        ];
        launch(&*self.dev, "add_u16", n, &args);
        out
    }

    /// Sends `v` as it lies on the device, downloaded into a kept buffer (the largest).
    fn send_vec(&mut self, to: Peer, v: &DeviceVec<D>) -> Result<(), NetworkError> {
        let mut message = self.spare.pop().unwrap_or_default();
        v.download_into(&mut message);
        self.session.send_encoded(to, message)
    }

    /// Receives `n` words and uploads them as they came; the buffer is kept.
    fn recv_vec<W: Word>(&mut self, from: Peer, n: usize) -> Result<DeviceVec<D>, NetworkError> {
        let message = self.session.recv_encoded::<W>(from, n)?;
        let v = DeviceVec::from_le_bytes(&self.dev, &message);
        if self.spare.len() < SPARE_BUFFERS {
            self.spare.push(message);
            self.spare.sort_by_key(Vec::capacity);
        }
        Ok(v)
    }

    /// [`ocelli_mpc::compare::split`] on the device, for `both` (`n` u16).
    fn split(&mut self, both: &DeviceVec<D>, n: usize) -> Result<DeviceVec<D>, NetworkError> {
        self.session.round();
        match self.session.party().index() {
            0 => {
                let r = self.draw_u16(Neighbour::Prev, n);
                let masked = self.add_u16(n, both, None, Some(&r), None);
                self.send_vec(Peer::Next, &masked)?;
                self.recv_vec::<u16>(Peer::Prev, n)
            }
            1 => {
                let t = self.draw_u16(Neighbour::Next, n);
                let masked = self.recv_vec::<u16>(Peer::Prev, n)?;
                Ok(self.add_u16(n, &masked, Some(both), None, Some(&t)))
            }
            _ => {
                let r = self.draw_u16(Neighbour::Next, n);
                let t = self.draw_u16(Neighbour::Prev, n);
                let b = self.add_u16(n, both, None, Some(&t), Some(&r));
                self.send_vec(Peer::Next, &b)?;
                Ok(b)
            }
        }
    }

    /// The cross term's round ([`ocelli_mpc::compare`]): this party's part, or `None` at party 0.
    fn cross_term(
        &mut self,
        md: &DeviceVec<D>,
        a: u32,
        n: usize,
    ) -> Result<Option<DeviceVec<D>>, NetworkError> {
        self.session.round();
        let party = self.session.party().index();
        let msg = DeviceVec::zeroed(&self.dev, 2 * n);
        let part = DeviceVec::zeroed(&self.dev, 2 * n);
        let none = Arg::Null;
        let run = |dev: &D, streams: [Arg<'_, D::Buf>; 3], received: [Arg<'_, D::Buf>; 2]| {
            let args = [
                Arg::U32(party as u32),
                md.arg(),
                streams[0],
                streams[1],
                streams[2],
                received[0],
                received[1],
                msg.arg(),
                part.arg(),
                Arg::U32(a),
                Arg::U64(n as u64),
            ];
            launch(dev, "cross_term", n, &args);
        };
        match party {
            0 => {
                let w0 = self.draw_u16(Neighbour::Next, n);
                let w1 = self.draw_u16(Neighbour::Next, n);
                run(&self.dev, [w0.arg(), w1.arg(), none], [none, none]);
                self.send_vec(Peer::Prev, &msg)?;
                Ok(None)
            }
            1 => {
                let w0 = self.draw_u16(Neighbour::Prev, n);
                let w1 = self.draw_u16(Neighbour::Prev, n);
                let p2 = self.draw_u16(Neighbour::Next, n);
                run(&self.dev, [w0.arg(), w1.arg(), p2.arg()], [none, none]);
                self.send_vec(Peer::Next, &msg)?;
                Ok(Some(part))
            }
            _ => {
                let p2 = self.draw_u16(Neighbour::Prev, n);
                let k1 = self.recv_vec::<u16>(Peer::Prev, n)?;
                let chosen = self.recv_vec::<u16>(Peer::Next, n)?;
                run(&self.dev, [none, none, p2.arg()], [k1.arg(), chosen.arg()]);
                Ok(Some(part))
            }
        }
    }

    fn x_part(
        &self,
        md: &DeviceVec<D>,
        cd: &DeviceVec<D>,
        cross: &DeviceVec<D>,
        a: u32,
        n: usize,
    ) -> DeviceVec<D> {
        let x = DeviceVec::zeroed(&self.dev, 4 * n);
        let args = [
            md.arg(),
            cd.arg(),
            cross.arg(),
            Arg::U32(a),
            x.arg(),
            Arg::U64(n as u64),
        ];
        launch(&*self.dev, "x_part", n, &args);
        x
    }

    /// The bit planes of `x` (`n` u32), XORed with `mask` where given.
    fn to_planes(&self, x: &DeviceVec<D>, n: usize, mask: Option<&DeviceVec<D>>) -> DeviceVec<D> {
        let w = words_for(n);
        let out = DeviceVec::zeroed(&self.dev, 8 * X_BITS * w);
        let args = [
            x.arg(),
            Arg::U64(n as u64),
            Arg::U64(w as u64),
            Arg::U32(X_BITS as u32),
            DeviceVec::arg_or_null(mask),
            out.arg(),
        ];
        launch(&*self.dev, "to_planes", X_BITS * w, &args);
        out
    }

    /// `cd` then `md` in one device allocation. Each is uploaded from where it lies and the
    /// halves joined on the device, so no pass-sized host vector is made for them; lengths
    /// that are not whole words are joined on the host.
    fn upload_pair(&self, cd: &[u16], md: &[u16]) -> DeviceVec<D> {
        let n = cd.len();
        if n == 0 || !(2 * n).is_multiple_of(8) {
            let both: Vec<u16> = cd.iter().chain(md).copied().collect();
            return DeviceVec::from_u16(&self.dev, &both);
        }
        let both = DeviceVec::zeroed(&self.dev, 4 * n);
        let words = 2 * n / 8;
        for (half, values) in [cd, md].into_iter().enumerate() {
            let part = DeviceVec::from_u16(&self.dev, values);
            let to = both.view(half * 2 * n..(half + 1) * 2 * n);
            launch(
                &*self.dev,
                "copy_words",
                words,
                &[to.arg(), part.arg(), words_arg(words)],
            );
        }
        both
    }

    /// [`ocelli_mpc::compare::compare`] on the device: the same rounds, messages and stream draws.
    ///
    /// # Errors
    /// Transport failures.
    ///
    /// # Panics
    /// If the two inputs differ in length.
    pub fn compare(
        &mut self,
        cd: &[u16],
        md: &[u16],
        a: u32,
    ) -> Result<DeviceComparison<D>, NetworkError> {
        assert_eq!(cd.len(), md.len());
        let n = cd.len();
        let w = words_for(n);
        let both = self.upload_pair(cd, md);
        let parts = self.split(&both, 2 * n)?;
        let (cd, md) = (parts.view(0..2 * n), parts.view(2 * n..4 * n));
        let cross = self.cross_term(&md, a, n)?;

        // The exchange of the parts (compare.rs, exchange_parts).
        let planes = X_BITS * w;
        let zeros = |dev: &Arc<D>| DeviceVec::zeroed(dev, 8 * planes);
        self.session.round();
        let (cross, x, single, pair) = match self.session.party().index() {
            0 => {
                let r = self.draw(Neighbour::Next, 2 * planes);
                let cross = self.recv_vec::<u16>(Peer::Prev, n)?;
                let x = self.x_part(&md, &cd, &cross, a, n);
                let pair = DeviceBits::new(zeros(&self.dev), self.to_planes(&x, n, None));
                let single = DeviceBits::new(r, zeros(&self.dev));
                (cross, x, single, pair)
            }
            1 => {
                let r = self.draw(Neighbour::Prev, 2 * planes);
                let cross = cross.expect("party 1 holds its part");
                let x = self.x_part(&md, &cd, &cross, a, n);
                let masked = self.to_planes(&x, n, Some(&r));
                self.send_vec(Peer::Next, &masked)?;
                let single = DeviceBits::new(masked, r);
                let pair = DeviceBits::zeroed(&self.dev, planes);
                (cross, x, single, pair)
            }
            _ => {
                let cross = cross.expect("party 2 holds its part");
                self.send_vec(Peer::Next, &cross)?;
                let masked = self.recv_vec::<u64>(Peer::Prev, planes)?;
                let x = self.x_part(&md, &cd, &cross, a, n);
                let pair = DeviceBits::new(self.to_planes(&x, n, None), zeros(&self.dev));
                let single = DeviceBits::new(zeros(&self.dev), masked);
                (cross, x, single, pair)
            }
        };
        let top = X_BITS - 1;
        let carry = carry_into(self, &single, &pair, w, top)?;
        let matches = plane(&single, w, top)
            .xor(&plane(&pair, w, top))
            .xor(&carry);
        Ok(DeviceComparison {
            cd,
            md,
            cross,
            x,
            matches,
        })
    }
}

impl<D: KernelDevice, T: Transport> Circuit for DeviceCircuit<'_, '_, D, T> {
    type Bits = DeviceBits<D>;

    fn party(&self) -> PartyId {
        self.session.party()
    }

    fn zeros(&mut self, words: usize) -> DeviceBits<D> {
        DeviceBits::zeroed(&self.dev, words)
    }

    fn and(&mut self, x: &DeviceBits<D>, y: &DeviceBits<D>) -> Result<DeviceBits<D>, NetworkError> {
        assert_eq!(x.words, y.words);
        let n = x.words;
        // The zero sharing, as Session::and draws it: n u64 from each stream.
        let next = self.draw(Neighbour::Next, 2 * n);
        let prev = self.draw(Neighbour::Prev, 2 * n);
        let own = DeviceVec::zeroed(&self.dev, 8 * n);
        let args = [
            x.own.arg(),
            x.prev.arg(),
            y.own.arg(),
            y.prev.arg(),
            next.arg(),
            prev.arg(),
            own.arg(),
            Arg::U64(n as u64),
        ];
        launch(&*self.dev, "and_gate", n, &args);
        self.session.round();
        self.send_vec(Peer::Next, &own)?;
        let received = self.recv_vec::<u64>(Peer::Prev, n)?;
        Ok(DeviceBits::new(own, received))
    }

    fn open(&mut self, x: &DeviceBits<D>) -> Result<Vec<u64>, NetworkError> {
        self.session.round();
        self.send_vec(Peer::Next, &x.prev)?;
        let missing = self.recv_vec::<u64>(Peer::Prev, x.words)?;
        let partial = xor_vec(&x.own, &missing, x.words);
        Ok(xor_vec(&partial, &x.prev, x.words).to_u64())
    }

    fn match_bits(
        &mut self,
        cd: &[u16],
        md: &[u16],
        a: u32,
    ) -> Result<DeviceBits<D>, NetworkError> {
        Ok(self.compare(cd, md, a)?.matches)
    }
}

#[cfg(any(test, feature = "parity"))]
pub mod parity;
#[cfg(all(test, feature = "host-kernels"))]
mod tests;
