//! The `gearlb` binary: everything lives in the library; see [`gearlb::cli`].

/// mimalloc (see Cargo.toml); the library's own tests use the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(gearlb::cli::main());
}
