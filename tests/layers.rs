//! The architecture's rules, checked on the source: the module graph has no cycle and
//! no source file is long.
//!
//! The graph's nodes are the crate's file modules (`src/a/b.rs` or `src/a/b/mod.rs` is
//! `a::b`); an edge `a -> b` is any path in `a` (a `use` tree or an inline path such as
//! `crate::b::f`, `super::x`, `self::y::z`, or `child::T` for a child module declared in
//! `a`) that resolves to an item of `b`. A path names the deepest module it reaches, so
//! `crate::proxy::X` (an item of `proxy/mod.rs`, even a re-export) is an edge to
//! `proxy`. Module declarations (`mod x;`) are ownership, not edges; `#[cfg(test)]`
//! modules, comments and string literals are left out.
//!
//! Run it alone with `cargo test --test layers -- --nocapture` to print the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex_lite::Regex;

/// No source file may be longer (tests in their own files are held to it too).
const MAX_LINES: usize = 600;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `a::b` for `src/a/b.rs` and `src/a/b/mod.rs`; `""` for `lib.rs`; `None` for `main.rs`.
fn module_of(file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src()).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.last().map(String::as_str) {
        Some("main") if parts.len() == 1 => return None,
        Some("mod") | Some("lib") => {
            parts.pop();
        }
        _ => {}
    }
    Some(parts.join("::"))
}

/// The source without comments, string contents and `#[cfg(test)]` modules.
fn strip(src: &str) -> String {
    let no_line_comments = Regex::new(r"//[^\n]*").unwrap();
    let no_block_comments = Regex::new(r"(?s)/\*.*?\*/").unwrap();
    let no_strings = Regex::new(r#""(?:\\.|[^"\\])*""#).unwrap();
    let s = no_line_comments.replace_all(src, "");
    let s = no_block_comments.replace_all(&s, "");
    let s = no_strings.replace_all(&s, "\"\"").into_owned();
    let test_mod =
        Regex::new(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*([;{])").unwrap();
    let mut out = String::new();
    let mut i = 0;
    while let Some(c) = test_mod.captures(&s[i..]) {
        let m = c.get(0).unwrap();
        out.push_str(&s[i..i + m.start()]);
        let mut j = i + m.end();
        if &c[1] == "{" {
            let bytes = s.as_bytes();
            let mut depth = 1;
            while depth > 0 && j < bytes.len() {
                match bytes[j] {
                    b'{' => depth += 1,
                    b'}' => depth -= 1,
                    _ => {}
                }
                j += 1;
            }
        }
        i = j;
    }
    out.push_str(&s[i..]);
    out
}

/// The paths of one `use` tree, e.g. `a::{b, c::{d as e, *}}` → `a::b`, `a::c::d`, `a::c`.
fn use_paths(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if tree.is_empty() {
        return;
    }
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open]
            .split("::")
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect();
        let base: Vec<String> = prefix.iter().cloned().chain(head).collect();
        let body = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let (mut depth, mut start) = (0, 0);
        for (k, ch) in body
            .char_indices()
            .chain(std::iter::once((body.len(), ',')))
        {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    use_paths(&body[start..k], &base, out);
                    start = k + 1;
                }
                _ => {}
            }
        }
        return;
    }
    let tree = tree.split(" as ").next().unwrap();
    let mut path: Vec<String> = prefix.to_vec();
    path.extend(
        tree.split("::")
            .map(str::trim)
            .filter(|p| !p.is_empty() && *p != "*")
            .map(String::from),
    );
    if path.last().is_some_and(|p| p == "self") {
        path.pop();
    }
    out.push(path);
}

struct Graph {
    modules: BTreeMap<String, PathBuf>,
    edges: BTreeMap<String, BTreeSet<String>>,
}

impl Graph {
    fn of_crate() -> Graph {
        let mut files = Vec::new();
        rust_files(&src(), &mut files);
        let modules: BTreeMap<String, PathBuf> = files
            .into_iter()
            .filter_map(|f| module_of(&f).map(|m| (m, f)))
            .collect();
        let mut g = Graph {
            modules,
            edges: BTreeMap::new(),
        };
        let child_decl = Regex::new(r"\bmod\s+(\w+)\s*;").unwrap();
        let use_decl = Regex::new(r"\buse\s+([^;]*);").unwrap();
        let inline = Regex::new(r"(?:^|[^\w:])((?:[A-Za-z_]\w*::)+[A-Za-z_]\w*)").unwrap();
        for (m, file) in &g.modules {
            let text = strip(&std::fs::read_to_string(file).unwrap());
            let here: Vec<String> = if m.is_empty() {
                Vec::new()
            } else {
                m.split("::").map(String::from).collect()
            };
            let children: BTreeSet<String> = child_decl
                .captures_iter(&text)
                .map(|c| c[1].to_string())
                .collect();
            let mut paths = Vec::new();
            for c in use_decl.captures_iter(&text) {
                use_paths(&c[1], &[], &mut paths);
            }
            for c in inline.captures_iter(&text) {
                paths.push(c[1].split("::").map(String::from).collect());
            }
            let targets: BTreeSet<String> = paths
                .iter()
                .filter_map(|p| absolute(&here, &children, p))
                .filter_map(|p| g.resolve(&p))
                .filter(|t| t != m && !t.is_empty())
                .collect();
            g.edges.insert(m.clone(), targets);
        }
        g
    }

    /// The deepest module a crate-absolute path reaches.
    fn resolve(&self, path: &[String]) -> Option<String> {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].join("::"))
            .find(|m| self.modules.contains_key(m))
    }

    /// Strongly connected components with more than one module (Tarjan).
    fn cycles(&self) -> Vec<Vec<String>> {
        struct T<'a> {
            g: &'a Graph,
            index: BTreeMap<&'a str, usize>,
            low: BTreeMap<&'a str, usize>,
            stack: Vec<&'a str>,
            on: BTreeSet<&'a str>,
            out: Vec<Vec<String>>,
        }
        fn visit<'a>(t: &mut T<'a>, v: &'a str) {
            let n = t.index.len();
            t.index.insert(v, n);
            t.low.insert(v, n);
            t.stack.push(v);
            t.on.insert(v);
            for w in t.g.edges.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if t.low[v] == t.index[v] {
                let mut comp = Vec::new();
                loop {
                    let w = t.stack.pop().unwrap();
                    t.on.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    t.out.push(comp);
                }
            }
        }
        let mut t = T {
            g: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on: BTreeSet::new(),
            out: Vec::new(),
        };
        for v in self.edges.keys() {
            if !t.index.contains_key(v.as_str()) {
                visit(&mut t, v);
            }
        }
        t.out
    }
}

/// `path` as written in module `here` (with child modules `children`) made
/// crate-absolute, or `None` if it does not start inside the crate.
fn absolute(here: &[String], children: &BTreeSet<String>, path: &[String]) -> Option<Vec<String>> {
    let head = path.first()?;
    match head.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "self" => Some(here.iter().chain(&path[1..]).cloned().collect()),
        "super" => {
            let ups = path.iter().take_while(|p| *p == "super").count();
            let base = &here[..here.len().saturating_sub(ups)];
            Some(base.iter().chain(&path[ups..]).cloned().collect())
        }
        h if children.contains(h) => Some(here.iter().chain(path).cloned().collect()),
        _ => None,
    }
}

#[test]
fn the_module_graph_has_no_cycle() {
    let g = Graph::of_crate();
    assert!(g.modules.len() > 20, "found only {:?}", g.modules.keys());
    for (m, to) in &g.edges {
        let to: Vec<&str> = to.iter().map(String::as_str).collect();
        println!(
            "{} -> {}",
            if m.is_empty() { "crate" } else { m },
            to.join(" ")
        );
    }
    let mut report = String::new();
    for c in g.cycles() {
        report.push_str(&format!("cycle among {}:\n", c.join(", ")));
        for a in &c {
            let inside: Vec<&str> = g.edges[a]
                .iter()
                .filter(|t| c.contains(t))
                .map(String::as_str)
                .collect();
            report.push_str(&format!("    {a} -> {}\n", inside.join(" ")));
        }
    }
    assert!(report.is_empty(), "{report}");
}

#[test]
fn no_source_file_is_long() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).unwrap().lines().count();
            (n > MAX_LINES).then(|| format!("{} ({n} lines)", f.display()))
        })
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "longer than {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_checker_sees_cycles_and_long_files() {
    // The rules above can fail: a use tree, an inline path and a child path each make
    // an edge, and a cycle through them is found.
    let mut paths = Vec::new();
    use_paths("crate::a::{b, c::{D as E, self}, f::*}", &[], &mut paths);
    let names: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        names,
        [
            "crate::a::b",
            "crate::a::c::D",
            "crate::a::c",
            "crate::a::f"
        ]
    );
    let here = vec!["x".to_string(), "y".to_string()];
    let kids: BTreeSet<String> = ["k".to_string()].into();
    let p = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    assert_eq!(
        absolute(&here, &kids, &p("super::z::T")),
        Some(p("x::z::T"))
    );
    assert_eq!(absolute(&here, &kids, &p("k::T")), Some(p("x::y::k::T")));
    assert_eq!(absolute(&here, &kids, &p("std::io")), None);
    let mut g = Graph {
        modules: ["a", "b", "c"]
            .iter()
            .map(|m| (m.to_string(), PathBuf::new()))
            .collect(),
        edges: BTreeMap::new(),
    };
    let e = |to: &[&str]| to.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    g.edges.insert("a".into(), e(&["b"]));
    g.edges.insert("b".into(), e(&["c"]));
    g.edges.insert("c".into(), e(&[]));
    assert!(g.cycles().is_empty());
    g.edges.insert("c".into(), e(&["a"]));
    assert_eq!(g.cycles(), vec![vec!["a", "b", "c"]]);
    let stripped = strip("use crate::a;\n#[cfg(test)]\nmod tests { use crate::b; }\n// crate::c\n");
    assert!(stripped.contains("crate::a") && !stripped.contains("crate::b"));
    assert!(!stripped.contains("crate::c"));
}
