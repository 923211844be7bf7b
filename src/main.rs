//! The `gearlb` binary: everything lives in the library; see [`gearlb::cli`].

fn main() {
    std::process::exit(gearlb::cli::main());
}
