//! The architecture's rules, checked on the source of every crate of the workspace (the
//! root package's `src/` and each `crates/*/src/`): no source file is long, the module
//! graph of each crate has no cycle, and neither has the graph of its subsystems.
//!
//! The source is read with a Rust parser (`syn`), so nothing in a comment, a string or a
//! char literal is taken for a path.
//!
//! A crate's module graph has as nodes its file modules (`src/a/b.rs` or `src/a/b/mod.rs`
//! is `a::b`, `lib.rs` is the root), found by following the `mod x;` declarations from
//! `lib.rs`. An edge `a -> b` is any path in `a` (a `use` tree or an inline path such as
//! `crate::b::f`, `super::x`, `self::y::z`, or `child::T` for a child module declared in
//! `a`, also inside a macro's tokens) that resolves to an item of `b`. A path names the
//! deepest file module it reaches, so `crate::proxy::X` (an item of `proxy/mod.rs`, even
//! a re-export) is an edge to `proxy`, while `crate::routing::X`, where `routing` is no
//! file module of this crate (a re-export of another crate's module, say), is no edge.
//! Module declarations are ownership, not edges; an inline `mod x { .. }` belongs to
//! its file module; `#[cfg(test)]` modules are left out, with their files.
//!
//! The subsystem graph collapses each file module but the root to its first segment
//! (`proxy::upstream::pool` is `proxy`).
//!
//! Run it alone with `cargo test --test layers -- --nocapture` to print both graphs.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use syn::buffer::{Cursor, TokenBuffer};
use syn::visit::{self, Visit};

/// No source file may be longer (tests in their own files are held to it too).
const MAX_LINES: usize = 600;

/// A module or a path as its segments: `["proxy", "upstream"]`.
type Segments = Vec<String>;

/// Each node (a module's name, `""` for the root) and the nodes it has edges to.
type Graph = BTreeMap<String, BTreeSet<String>>;

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace's member crates under `crates/` (none before the split).
fn member_crates() -> Vec<PathBuf> {
    let Ok(dirs) = fs::read_dir(workspace().join("crates")) else {
        return Vec::new();
    };
    let mut crates: Vec<PathBuf> = dirs
        .flatten()
        .map(|e| e.path())
        .filter(|d| d.join("Cargo.toml").is_file())
        .collect();
    crates.sort();
    crates
}

/// The `src/` folder of each library crate: the root package's, then the members'.
fn library_sources() -> Vec<PathBuf> {
    let members = member_crates().into_iter().map(|c| c.join("src"));
    std::iter::once(workspace().join("src"))
        .chain(members)
        .filter(|src| src.join("lib.rs").is_file())
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `file (N lines)` for each file over [`MAX_LINES`].
fn long_files(files: &[PathBuf]) -> Vec<String> {
    let mut long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = fs::read_to_string(f).unwrap().lines().count();
            (n > MAX_LINES).then(|| format!("{} ({n} lines)", f.display()))
        })
        .collect();
    long.sort();
    long
}

/// Whether the attributes hold `#[cfg(test)]`.
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
    })
}

/// The names of the modules (file or inline) declared among `items`.
fn child_modules(items: &[syn::Item]) -> BTreeSet<String> {
    items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Mod(m) if !is_test_only(&m.attrs) => Some(m.ident.to_string()),
            _ => None,
        })
        .collect()
}

/// The file of module `name` declared by `mod name;` in a module whose children live
/// in `dir`.
fn module_file(dir: &Path, name: &str) -> PathBuf {
    let flat = dir.join(format!("{name}.rs"));
    let nested = dir.join(name).join("mod.rs");
    match (flat.is_file(), nested.is_file()) {
        (true, _) => flat,
        (false, true) => nested,
        _ => panic!("no file for `mod {name};` in {}", dir.display()),
    }
}

/// The folder of the files of the modules that `file` declares: its own folder for
/// `lib.rs` and `mod.rs`, `a/b/` for `a/b.rs`.
fn children_dir(file: &Path) -> PathBuf {
    match file.file_name().and_then(|n| n.to_str()) {
        Some("lib.rs" | "mod.rs") => file.parent().unwrap().to_path_buf(),
        _ => file.with_extension(""),
    }
}

/// `path` as written in module `here` (whose child modules are `children`) made
/// crate-absolute, or `None` if it starts outside the crate (another crate, `std`, a
/// local name).
fn absolute(here: &[String], children: &BTreeSet<String>, path: &[String]) -> Option<Segments> {
    let first = path.first()?.as_str();
    let (mut abs, rest) = match first {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (here.to_vec(), &path[1..]),
        "super" => (here.to_vec(), path),
        name if children.contains(name) => (here.to_vec(), path),
        _ => return None,
    };
    for segment in rest {
        match segment.as_str() {
            "super" => {
                abs.pop();
            }
            name => abs.push(name.to_string()),
        }
    }
    Some(abs)
}

/// The paths of one `use` tree, e.g. `a::{b, c::{D as E, self}, f::*}` → `a::b`,
/// `a::c::D`, `a::c`, `a::f`.
fn use_paths(tree: &syn::UseTree, prefix: &mut Segments, out: &mut Vec<Segments>) {
    let leaf = |prefix: &Segments, ident: &syn::Ident| {
        let mut path = prefix.clone();
        if ident != "self" {
            path.push(ident.to_string());
        }
        path
    };
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_paths(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => out.push(leaf(prefix, &n.ident)),
        syn::UseTree::Rename(r) => out.push(leaf(prefix, &r.ident)),
        syn::UseTree::Glob(_) => out.push(prefix.clone()),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                use_paths(tree, prefix, out);
            }
        }
    }
}

/// The cursor past `::` if it stands on one.
fn past_colons(cursor: Cursor) -> Option<Cursor> {
    let (a, cursor) = cursor.punct()?;
    let (b, cursor) = cursor.punct()?;
    (a.as_char() == ':' && b.as_char() == ':').then_some(cursor)
}

/// The paths of two segments or more (`a::b`, `$crate::c::d`) in a macro's tokens,
/// which the parser leaves unparsed; literals are tokens of their own, so they add none.
fn token_paths(mut cursor: Cursor, out: &mut Vec<Segments>) {
    // After `::` (as in `::std::x` or `f::<T>::g`) an ident starts no path.
    let mut after_colons = false;
    while !cursor.eof() {
        if let Some((inside, _, _, next)) = cursor.any_group() {
            token_paths(inside, out);
            (cursor, after_colons) = (next, false);
        } else if let Some((first, mut next)) = cursor.ident() {
            let mut path = vec![first.to_string()];
            while let Some((ident, rest)) = past_colons(next).and_then(Cursor::ident) {
                path.push(ident.to_string());
                next = rest;
            }
            if !after_colons && path.len() > 1 {
                out.push(path);
            }
            (cursor, after_colons) = (next, false);
        } else if let Some(next) = past_colons(cursor) {
            (cursor, after_colons) = (next, true);
        } else {
            cursor = cursor.token_tree().unwrap().1;
            after_colons = false;
        }
    }
}

/// A module's scope while its file is read: the file module, or an inline module in it.
struct Scope {
    module: Segments,
    children: BTreeSet<String>,
    /// Where the files of the modules it declares are.
    dir: PathBuf,
}

/// What one file says: the file modules it declares and the crate-absolute paths it names.
#[derive(Default)]
struct FileScan {
    scopes: Vec<Scope>,
    declared: Vec<(Segments, PathBuf)>,
    paths: Vec<Segments>,
}

impl FileScan {
    fn of(module: &[String], file: &Path) -> FileScan {
        let text = fs::read_to_string(file).unwrap();
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut scan = FileScan::default();
        scan.scopes.push(Scope {
            module: module.to_vec(),
            children: child_modules(&ast.items),
            dir: children_dir(file),
        });
        scan.visit_file(&ast);
        scan
    }

    fn record(&mut self, path: &[String]) {
        let scope = self.scopes.last().unwrap();
        if let Some(abs) = absolute(&scope.module, &scope.children, path) {
            self.paths.push(abs);
        }
    }
}

impl<'ast> Visit<'ast> for FileScan {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if is_test_only(&m.attrs) {
            return;
        }
        let name = m.ident.to_string();
        let scope = self.scopes.last().unwrap();
        let module = [scope.module.clone(), vec![name.clone()]].concat();
        match &m.content {
            None => {
                let file = module_file(&scope.dir, &name);
                self.declared.push((module, file));
            }
            Some((_, items)) => {
                let dir = scope.dir.join(&name);
                let children = child_modules(items);
                self.scopes.push(Scope {
                    module,
                    children,
                    dir,
                });
                for item in items {
                    self.visit_item(item);
                }
                self.scopes.pop();
            }
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if u.leading_colon.is_none() {
            let mut paths = Vec::new();
            use_paths(&u.tree, &mut Vec::new(), &mut paths);
            for path in paths {
                self.record(&path);
            }
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() && p.segments.len() > 1 {
            let path: Segments = p.segments.iter().map(|s| s.ident.to_string()).collect();
            self.record(&path);
        }
        visit::visit_path(self, p);
    }

    /// `pub(super)` and `pub(in crate::a)` name a module without using it.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        visit::visit_macro(self, m);
        let tokens = TokenBuffer::new2(m.tokens.clone());
        let mut paths = Vec::new();
        token_paths(tokens.begin(), &mut paths);
        for path in paths {
            self.record(&path);
        }
    }
}

/// A library crate's file modules (from `src/lib.rs` down its `mod` declarations), each
/// with the crate-absolute paths it names.
fn scan_crate(src: &Path) -> BTreeMap<Segments, Vec<Segments>> {
    let mut modules = BTreeMap::new();
    let mut todo = vec![(Segments::new(), src.join("lib.rs"))];
    while let Some((module, file)) = todo.pop() {
        let scan = FileScan::of(&module, &file);
        todo.extend(scan.declared);
        modules.insert(module, scan.paths);
    }
    modules
}

/// The deepest file module (not the root) that a crate-absolute path reaches.
fn deepest_module<'m>(
    modules: &'m BTreeMap<Segments, Vec<Segments>>,
    path: &[String],
) -> Option<&'m Segments> {
    (1..=path.len())
        .rev()
        .find_map(|n| modules.get_key_value(&path[..n]).map(|(m, _)| m))
}

fn module_graph(modules: &BTreeMap<Segments, Vec<Segments>>) -> Graph {
    modules
        .iter()
        .map(|(m, paths)| {
            let to = paths
                .iter()
                .filter_map(|p| deepest_module(modules, p))
                .filter(|t| *t != m)
                .map(|t| t.join("::"))
                .collect();
            (m.join("::"), to)
        })
        .collect()
}

/// `proxy` for `proxy::upstream::pool`.
fn subsystem(m: &str) -> &str {
    m.split("::").next().unwrap()
}

/// The module graph with each module but the root collapsed to its subsystem.
fn subsystem_graph(modules: &Graph) -> Graph {
    let mut g = Graph::new();
    for (from, to) in modules.iter().filter(|(m, _)| !m.is_empty()) {
        let a = subsystem(from);
        let edges = g.entry(a.to_string()).or_default();
        edges.extend(
            to.iter()
                .map(|t| subsystem(t))
                .filter(|b| *b != a)
                .map(String::from),
        );
    }
    g
}

/// Strongly connected components with more than one node (Tarjan).
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.g.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.out.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

fn node(m: &str) -> &str {
    if m.is_empty() {
        "crate"
    } else {
        m
    }
}

/// The name of a crate's `src/` in reports: `src`, `crates/core/src`.
fn label(src: &Path) -> String {
    src.strip_prefix(workspace())
        .unwrap_or(src)
        .display()
        .to_string()
}

/// Each cycle of `g` with its edges inside the cycle; empty if there is none. For the
/// subsystem graph, `modules` (the module graph) gives the module edges behind each edge.
fn cycle_report(src: &Path, g: &Graph, modules: Option<&Graph>) -> String {
    let mut report = String::new();
    for c in cycles(g) {
        report += &format!("{}: cycle among {}:\n", label(src), c.join(", "));
        for (a, b) in c
            .iter()
            .flat_map(|a| g[a].iter().filter(|b| c.contains(b)).map(move |b| (a, b)))
        {
            report += &format!("    {} -> {}", node(a), node(b));
            if let Some(modules) = modules {
                let via: Vec<String> = modules
                    .iter()
                    .filter(|(m, _)| !m.is_empty() && subsystem(m) == a)
                    .flat_map(|(m, to)| {
                        to.iter()
                            .filter(|t| subsystem(t) == b)
                            .map(move |t| format!("{m} -> {t}"))
                    })
                    .collect();
                report += &format!(" ({})", via.join(", "));
            }
            report += "\n";
        }
    }
    report
}

/// `a -> b c` for each node `a` of `g`.
fn graph_lines(g: &Graph) -> Vec<String> {
    g.iter()
        .map(|(m, to)| {
            let to: Vec<&str> = to.iter().map(|t| node(t)).collect();
            format!("{} -> {}", node(m), to.join(" "))
        })
        .collect()
}

fn print_graph(title: &str, g: &Graph) {
    println!("== {title}");
    for line in graph_lines(g) {
        println!("{line}");
    }
}

#[test]
fn the_module_graph_has_no_cycle() {
    let (mut modules, mut report) = (0, String::new());
    for src in library_sources() {
        let g = module_graph(&scan_crate(&src));
        print_graph(&format!("file modules of {}", label(&src)), &g);
        modules += g.len();
        report += &cycle_report(&src, &g, None);
    }
    assert!(modules > 20, "found only {modules} modules");
    assert!(report.is_empty(), "{report}");
}

#[test]
fn no_cycle_between_subsystems() {
    let mut report = String::new();
    for src in library_sources() {
        let modules = module_graph(&scan_crate(&src));
        let g = subsystem_graph(&modules);
        print_graph(&format!("subsystems of {}", label(&src)), &g);
        report += &cycle_report(&src, &g, Some(&modules));
    }
    assert!(report.is_empty(), "{report}");
}

#[test]
fn no_source_file_is_long() {
    let mut files = Vec::new();
    rust_files(&workspace().join("src"), &mut files);
    for member in member_crates() {
        for dir in [member.join("src"), member.join("tests")] {
            if dir.is_dir() {
                rust_files(&dir, &mut files);
            }
        }
    }
    let long = long_files(&files);
    assert!(
        long.is_empty(),
        "longer than {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

/// The rules above can fail: a crate written to a temporary folder with a cycle `a -> b
/// -> a`, paths of every kind, and literals and comments that look like paths.
#[test]
fn the_checker_sees_cycles_and_not_literals() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let files = [
        (
            "lib.rs",
            "pub mod a;\npub mod b;\npub mod d;\npub mod e;\n#[cfg(test)]\nmod t;\n\
             pub use other_crate::routing;\n",
        ),
        (
            "a/mod.rs",
            r#"pub mod b;
pub fn c() {}
pub fn f() {
    super::b::top();
    b::g();
    let s = "crate::e::x // not a comment";
    let q = '"';
    let r = crate::d::X;
    let t = "one line \
             crate::e::y";
    // crate::e::z
    /* crate::e::w */
}
"#,
        ),
        (
            "a/b.rs",
            "pub fn g() { println!(\"{} crate::e::v\", crate::d::y()); }\n",
        ),
        ("b.rs", "use crate::{a::{b, c}, d};\npub fn top() {}\n"),
        (
            "d.rs",
            "pub struct X;\npub fn y() {}\npub mod k;\n\
             mod inner { pub fn f() -> super::X { super::X } }\n\
             #[cfg(test)]\nmod tests { use crate::b; }\n",
        ),
        ("d/k.rs", "pub fn k() { super::y() }\n"),
        ("e.rs", "pub fn r() -> crate::routing::X { todo!() }\n"),
        ("t.rs", "use crate::a;\n"),
    ];
    for (name, text) in files {
        let file = src.join(name);
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(file, text).unwrap();
    }

    let g = module_graph(&scan_crate(&src));
    assert_eq!(
        graph_lines(&g),
        [
            "crate -> ",
            "a -> a::b b d",
            "a::b -> d",
            "b -> a a::b d",
            "d -> ",
            "d::k -> d",
            "e -> ",
        ]
    );
    assert_eq!(cycles(&g), [["a", "b"]]);
    assert_eq!(
        cycle_report(&src, &g, None),
        format!(
            "{}: cycle among a, b:\n    a -> b\n    b -> a\n",
            src.display()
        )
    );
    let subsystems = subsystem_graph(&g);
    assert_eq!(cycles(&subsystems), [["a", "b"]]);
    assert_eq!(subsystems["a"], ["b", "d"].map(String::from).into());
    let report = cycle_report(&src, &subsystems, Some(&g));
    assert!(
        report.contains("    b -> a (b -> a, b -> a::b)\n"),
        "{report}"
    );

    let tree: syn::ItemUse = syn::parse_str("use crate::a::{b, c::{D as E, self}, f::*};").unwrap();
    let mut paths = Vec::new();
    use_paths(&tree.tree, &mut Vec::new(), &mut paths);
    let paths: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        paths,
        [
            "crate::a::b",
            "crate::a::c::D",
            "crate::a::c",
            "crate::a::f"
        ]
    );

    fs::write(src.join("long.rs"), "//\n".repeat(MAX_LINES + 1)).unwrap();
    let mut all = Vec::new();
    rust_files(&src, &mut all);
    assert_eq!(long_files(&all).len(), 1);
}
