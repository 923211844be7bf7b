# bench/lib/tools.sh - what a bench/run.sh run needs before it starts: the gearlb
# binary (built when stale, BUILD=1), the tools (installed from Debian when missing),
# bench/openloop and oha. Sourced by run.sh.
# Its variables and functions are shared with run.sh's other pieces (sourced together):
# shellcheck shell=bash disable=SC2034,SC2153,SC2154

ensure_binary() {
    local stale=""
    if [[ -x $GEARLB_BIN ]]; then
        stale=$(find "$REPO/src" "$REPO/crates" "$REPO/Cargo.toml" -newer "$GEARLB_BIN" \
            -print -quit 2>/dev/null || true)
        [[ -z $stale ]] && return 0
    fi
    if [[ $BUILD != 1 ]]; then
        [[ -x $GEARLB_BIN ]] || die "$GEARLB_BIN missing and BUILD=0"
        log "WARNING: $GEARLB_BIN is older than $stale; benchmarking it anyway (BUILD=0)"
        return 0
    fi
    [[ $GEARLB_BIN == "$REPO/target/release/gearlb" ]] ||
        die "$GEARLB_BIN missing or stale, and it is not this repo's release binary"
    need cargo "(install Rust: https://rustup.rs)"
    log "building gearlb: cargo build --release${stale:+ ($stale is newer than the binary)}"
    (cd "$REPO" && cargo build --release -p gearlb --bin gearlb) || die "cargo build --release failed"
}

# uses_openloop: whether this run's fixed_rate load is bench/openloop.
uses_openloop() { [[ " ${SCENARIOS[*]} " == *" fixed_rate "* && $FIXED_LOAD == openloop ]]; }

ensure_tools() {
    apt_need wrk wrk
    apt_need curl curl
    apt_need nginx nginx-light
    apt_need ss iproute2
    need awk gawk
    if [[ " ${TARGETS[*]} " == *" haproxy-"* ]]; then
        apt_need haproxy haproxy
        HAPROXY_BIN=$(command -v haproxy)
    fi
    if [[ " ${SCENARIOS[*]} " == *" instructions "* ]]; then
        apt_need valgrind valgrind
        need callgrind_control valgrind
        need python3 python3
    fi
    [[ $FIXED_LOAD == openloop || $FIXED_LOAD == oha ]] ||
        die "FIXED_LOAD=$FIXED_LOAD: expected openloop or oha"
    # With BUILD=0 an existing binary is used as it is, as for gearlb.
    # SMOKE=1 builds and runs its debug build (a few seconds once cargo test built it).
    if uses_openloop && [[ $BUILD != 0 || ! -x $OPENLOOP_BIN ]]; then
        local profile=(--release)
        [[ $OPENLOOP_BIN != "$REPO/target/debug/openloop" ]] || profile=()
        [[ $OPENLOOP_BIN == "$REPO/target/release/openloop" || ${#profile[@]} == 0 ]] ||
            die "OPENLOOP_BIN=$OPENLOOP_BIN: not built here; give an existing binary with BUILD=0"
        need cargo "(install Rust: https://rustup.rs)"
        log "building bench/openloop (fixed_rate's load): cargo build ${profile[*]} --locked"
        cargo build "${profile[@]}" --locked --quiet --manifest-path "$SCRIPT_DIR/openloop/Cargo.toml" \
            --target-dir "$REPO/target" >&2 || die "building bench/openloop failed"
    fi
    if [[ ( " ${SCENARIOS[*]} " == *" fixed_rate "* && $FIXED_LOAD == oha ) ||
        " ${SCENARIOS[*]} " == *" instructions "* ]]; then
        if [[ ! -x $OHA_BIN ]]; then
            need cargo "(install Rust: https://rustup.rs)"
            log "installing oha: cargo install --locked oha (a few minutes)"
            cargo install --locked oha >&2 || die "cargo install oha failed"
            OHA_BIN=$HOME/.cargo/bin/oha
        fi
    fi
    if [[ " ${SCENARIOS[*]} " == *" idle_memory "* ]]; then
        need python3 python3
    fi
}

