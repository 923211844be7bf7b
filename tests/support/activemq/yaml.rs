//! [`yaml_of`]: the body origin-server's ActiveMQ plugin publishes for an [`Event`],
//! byte for byte: a Ruby Hash with symbol keys through Psych's `to_yaml` (Ruby 3.1,
//! psych 4, libyaml 0.2), for tests that cannot run the plugin itself.
//!
//! A string's style is Psych's choice (`Psych::Visitors::YAMLTree#visit_String`, with
//! `Psych::ScalarScanner#tokenize` deciding whether a plain scalar would read back as
//! something else), then libyaml's (`yaml_emitter_analyze_scalar`, `select_scalar_style`:
//! plain → single-quoted → double-quoted when not allowed), written as libyaml writes it
//! (escapes, and folding at a space past column 80). What this does not reproduce (a
//! `|+` block, a string ending in a line break that is not a block, `<<`, a fold inside
//! a list) panics rather than produce other bytes. Checked against Psych by the
//! `yaml_of_*` tests of `tests/stomp.rs`.

use regex_lite::Regex;

use super::plugin::{Event, Mapping};

/// libyaml's `best_width`.
const WIDTH: usize = 80;

/// The YAML document the plugin publishes for `event`.
pub fn yaml_of(event: &Event) -> String {
    let mut y = Doc(String::from("---\n"));
    match event {
        Event::CreateApplication {
            app,
            namespace,
            scalable,
            ha,
        }
        | Event::DeleteApplication {
            app,
            namespace,
            scalable,
            ha,
        } => {
            let action = match event {
                Event::CreateApplication { .. } => "create_application",
                _ => "delete_application",
            };
            y.head(action, app, namespace);
            y.raw("scalable", &scalable.to_string());
            y.raw("ha", &ha.to_string());
        }
        Event::AddPublicEndpoint {
            app,
            namespace,
            gear_id,
            public_port_name,
            public_address,
            public_port,
            protocols,
            types,
            mappings,
        } => {
            y.head("add_public_endpoint", app, namespace);
            y.str("gear_id", gear_id);
            y.str("public_port_name", public_port_name);
            y.str("public_address", public_address);
            y.raw("public_port", &public_port.to_string());
            y.list("protocols", protocols);
            y.list("types", types);
            y.mappings(mappings);
        }
        Event::RemovePublicEndpoint {
            app,
            namespace,
            gear_id,
            public_address,
            public_port,
        } => {
            y.head("remove_public_endpoint", app, namespace);
            y.str("gear_id", gear_id);
            y.str("public_address", public_address);
            y.raw("public_port", &public_port.to_string());
        }
        Event::AddAlias {
            app,
            namespace,
            alias,
        } => {
            y.head("add_alias", app, namespace);
            y.str("alias", alias);
        }
        Event::RemoveAlias {
            app,
            namespace,
            alias,
        } => {
            y.head("remove_alias", app, namespace);
            y.str("alias", alias);
        }
        Event::AddSsl {
            app,
            namespace,
            alias,
            ssl,
            private_key,
            pass_phrase,
        } => {
            y.head("add_ssl", app, namespace);
            y.str("alias", alias);
            y.str("ssl", ssl);
            y.str("private_key", private_key);
            match pass_phrase {
                Some(p) => y.str("pass_phrase", p),
                // nil: an empty plain scalar.
                None => y.0.push_str(":pass_phrase:\n"),
            }
        }
        Event::RemoveSsl {
            app,
            namespace,
            alias,
        } => {
            y.head("remove_ssl", app, namespace);
            y.str("alias", alias);
        }
    }
    y.0
}

/// A block mapping with symbol keys, at the top of a document.
struct Doc(String);

impl Doc {
    fn head(&mut self, action: &str, app: &str, namespace: &str) {
        self.raw("action", &format!(":{action}"));
        self.str("app_name", app);
        self.str("namespace", namespace);
    }

    /// A value written as is (symbols, booleans, integers).
    fn raw(&mut self, key: &str, value: &str) {
        self.0.push_str(&format!(":{key}: {value}\n"));
    }

    fn str(&mut self, key: &str, value: &str) {
        let prefix = format!(":{key}:");
        let column = prefix.chars().count();
        self.0.push_str(&prefix);
        self.0.push_str(&scalar(value, column, 2, true));
        self.0.push('\n');
    }

    /// An indentless block sequence of strings (`[]` when empty).
    fn list(&mut self, key: &str, items: &[String]) {
        if items.is_empty() {
            self.0.push_str(&format!(":{key}: []\n"));
            return;
        }
        self.0.push_str(&format!(":{key}:\n"));
        for item in items {
            self.0.push('-');
            self.0.push_str(&scalar(item, 1, 2, false));
            self.0.push('\n');
        }
    }

    /// The endpoint's mappings: a sequence of string-keyed mappings.
    fn mappings(&mut self, mappings: &[Mapping]) {
        if mappings.is_empty() {
            self.0.push_str(":mappings: []\n");
            return;
        }
        self.0.push_str(":mappings:\n");
        for m in mappings {
            self.0.push_str("- frontend:");
            self.0.push_str(&scalar(&m.frontend, 11, 4, false));
            self.0.push_str("\n  backend:");
            self.0.push_str(&scalar(&m.backend, 10, 4, false));
            self.0.push('\n');
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

/// Ruby's `[[:word:]]`/`[[:alpha:]]` are Unicode, regex-lite's ASCII: non-ASCII letters
/// and digits become `a`, other non-ASCII characters `¤` (neither word nor special).
fn ascii_view(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            c if c.is_ascii() => c,
            c if c.is_alphanumeric() => 'a',
            _ => '¤',
        })
        .collect()
}

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap()
}

/// `Psych::ScalarScanner#tokenize(s)` returns a String (`s` has no line break).
fn reads_as_string(s: &str) -> bool {
    let s = &ascii_view(s);
    if s.is_empty() {
        return false;
    }
    if re(r"^[^\d.:-]?[[:alpha:]_\s!@#$%\^&*(){}<>|/\\~;=]+").is_match(s) {
        if s.chars().count() > 5 || re(r"(?i)^[^ytonf~]").is_match(s) {
            return true;
        }
        return !(s == "~" || re(r"(?i)^(null|yes|true|on|no|false|off)$").is_match(s));
    }
    let time = r"^-?\d{4}-\d{1,2}-\d{1,2}(?:[Tt]|\s+)\d{1,2}:\d\d:\d\d(?:\.\d*)?(?:\s*(?:Z|[-+]\d{1,2}:?(?:\d\d)?))?$";
    let date = r"^\d{4}-(?:1[012]|0\d|\d)-(?:[12]\d|3[01]|0\d|\d)$";
    let others = [
        time,
        r"(?i)^\+?\.inf$",
        r"(?i)^-\.inf$",
        r"(?i)^\.nan$",
        r"^:.",
        r"^[-+]?[0-9][0-9_]*(:[0-5]?[0-9]){1,2}$",
        r"^[-+]?[0-9][0-9_]*(:[0-5]?[0-9]){1,2}\.[0-9_]*$",
    ];
    if re(date).is_match(s) {
        // Psych's Date.strptime refuses a day past the month's end: then a String.
        let n: Vec<u32> = s.split('-').map(|x| x.parse().unwrap_or(0)).collect();
        let leap =
            n[0].is_multiple_of(4) && (!n[0].is_multiple_of(100) || n[0].is_multiple_of(400));
        let days = [
            31,
            if leap { 29 } else { 28 },
            31,
            30,
            31,
            30,
            31,
            31,
            30,
            31,
            30,
            31,
        ];
        return !(1..=12).contains(&n[1]) || n[2] == 0 || n[2] > days[n[1] as usize - 1];
    }
    if others.iter().any(|p| re(p).is_match(s)) {
        return false;
    }
    let float = r"^(?:[-+]?([0-9][0-9_,]*)?\.[0-9]*([eE][-+][0-9]+)?)$";
    if re(float).is_match(s) {
        return re(r"^[-+]?\.$").is_match(s);
    }
    let int = r"^(?:[-+]?0b[0-1_,]+|[-+]?0[0-7_,]+|[-+]?(?:0|[1-9](?:[0-9]|,[0-9]|_[0-9])*)|[-+]?0x[0-9a-fA-F_,]+)$";
    !re(int).is_match(s)
}

/// The style `YAMLTree#visit_String` asks for.
fn psych_style(s: &str) -> Style {
    let chars: Vec<char> = s.chars().collect();
    // /\n(?!\Z)/: a line break other than the last, or the one before a last.
    let n = chars.len();
    let literal = chars
        .iter()
        .enumerate()
        .any(|(i, &c)| c == '\n' && !(i + 1 == n || (i + 2 == n && chars[i + 1] == '\n')));
    if literal {
        return Style::Literal;
    }
    assert!(
        !s.contains('\n'),
        "yaml_of: a string ending in a line break ({s:?}) is not reproduced"
    );
    assert!(s != "<<", "yaml_of: `<<` (tagged !!str) is not reproduced");
    if s == "y" || s == "n" {
        return Style::Double;
    }
    if re(r"^[^\w][^\x22]*$").is_match(&ascii_view(s)) {
        return Style::Double;
    }
    if !reads_as_string(s) || re(r"^0[0-7]*[89]").is_match(s) {
        return Style::Single;
    }
    Style::Plain
}

/// libyaml's printable characters (with `unicode` on, as Psych sets it).
fn printable(c: char) -> bool {
    matches!(c as u32, 0x0A | 0x20..=0x7E | 0xA0..=0xD7FF | 0xE000..=0xFFFD) && c != '\u{FEFF}'
}

fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn blankz(c: Option<char>) -> bool {
    match c {
        None => true,
        Some(c) => c == ' ' || c == '\t' || is_break(c),
    }
}

/// What `yaml_emitter_analyze_scalar` allows, in block context, not as a key:
/// (plain, single-quoted, block).
fn allowed(s: &str) -> (bool, bool, bool) {
    let c: Vec<char> = s.chars().collect();
    if c.is_empty() {
        return (true, true, false);
    }
    let (mut block_ind, mut special, mut line_breaks) = (false, false, false);
    let (mut leading_space, mut leading_break, mut trailing_space, mut trailing_break) =
        (false, false, false, false);
    let (mut break_space, mut space_break) = (false, false);
    let (mut prev_space, mut prev_break) = (false, false);
    if s.starts_with("---") || s.starts_with("...") {
        block_ind = true;
    }
    let mut preceded_by_ws = true;
    for i in 0..c.len() {
        let ch = c[i];
        let followed_by_ws = blankz(c.get(i + 1).copied());
        if i == 0 {
            if "#,[]{}&*!|>'\"%@`".contains(ch) || (ch == '-' && followed_by_ws) {
                block_ind = true;
            }
            if (ch == '?' || ch == ':') && followed_by_ws {
                block_ind = true;
            }
        } else if (ch == ':' && followed_by_ws) || (ch == '#' && preceded_by_ws) {
            block_ind = true;
        }
        if !printable(ch) {
            special = true;
        }
        if is_break(ch) {
            line_breaks = true;
        }
        if ch == ' ' {
            leading_space |= i == 0;
            trailing_space |= i + 1 == c.len();
            break_space |= prev_break;
            (prev_space, prev_break) = (true, false);
        } else if is_break(ch) {
            leading_break |= i == 0;
            trailing_break |= i + 1 == c.len();
            space_break |= prev_space;
            (prev_space, prev_break) = (false, true);
        } else {
            (prev_space, prev_break) = (false, false);
        }
        preceded_by_ws = blankz(Some(ch));
    }
    let mut plain = !(leading_space || leading_break || trailing_space || trailing_break);
    let mut single = true;
    let mut block = !trailing_space;
    if break_space {
        plain = false;
        single = false;
    }
    if space_break || special {
        plain = false;
        single = false;
        block = false;
    }
    if line_breaks || block_ind {
        plain = false;
    }
    (plain, single, block)
}

/// A string scalar as libyaml writes it after `key:` (or `-`) at `column`, with
/// `indent` for its continuation lines; folding only where `may_fold`.
fn scalar(s: &str, column: usize, indent: usize, may_fold: bool) -> String {
    let (plain_ok, single_ok, block_ok) = allowed(s);
    let mut style = psych_style(s);
    if style == Style::Literal && !block_ok {
        style = Style::Double;
    }
    if style == Style::Plain && !plain_ok {
        style = Style::Single;
    }
    if style == Style::Single && !single_ok {
        style = Style::Double;
    }
    if style == Style::Literal {
        return literal(s, indent);
    }
    let mut w = Writer {
        out: String::new(),
        column,
        indent,
        may_fold,
    };
    w.put(' ');
    let c: Vec<char> = s.chars().collect();
    match style {
        Style::Plain => w.text(&c, false, |w, ch| w.put(ch)),
        Style::Single => {
            w.put('\'');
            w.text(&c, true, |w, ch| {
                w.put(ch);
                if ch == '\'' {
                    w.put('\'');
                }
            });
            w.put('\'');
        }
        _ => {
            w.put('"');
            w.double(&c);
            w.put('"');
        }
    }
    w.out
}

/// `|` with its hints, then each line indented (empty lines left empty).
fn literal(s: &str, indent: usize) -> String {
    let mut out = String::from(" |");
    // libyaml's hint is its `best_indent`, 2, whatever the block's indentation.
    if s.starts_with([' ', '\n']) {
        out.push('2');
    }
    let body = match s.strip_suffix('\n') {
        Some(b) => {
            assert!(
                !b.ends_with('\n'),
                "yaml_of: a `|+` block is not reproduced"
            );
            b
        }
        None => {
            out.push('-');
            s
        }
    };
    for line in body.split('\n') {
        out.push('\n');
        if !line.is_empty() {
            out.push_str(&" ".repeat(indent));
            out.push_str(line);
        }
    }
    out
}

struct Writer {
    out: String,
    column: usize,
    indent: usize,
    may_fold: bool,
}

impl Writer {
    fn put(&mut self, c: char) {
        self.out.push(c);
        self.column += 1;
    }

    fn put_str(&mut self, s: &str) {
        s.chars().for_each(|c| self.put(c));
    }

    /// A line break and the indentation: a fold at a space.
    fn fold(&mut self) {
        assert!(
            self.may_fold,
            "yaml_of: a fold inside a list is not reproduced"
        );
        self.out.push('\n');
        self.out.push_str(&" ".repeat(self.indent));
        self.column = self.indent;
    }

    /// Plain (`quoted` false) or single-quoted text: a space past the width (not the
    /// first of several; in quotes, not the first or last character) becomes a fold.
    fn text(&mut self, c: &[char], quoted: bool, mut write: impl FnMut(&mut Writer, char)) {
        let mut spaces = false;
        for (i, &ch) in c.iter().enumerate() {
            if ch == ' ' {
                let inner = !quoted || (i != 0 && i + 1 != c.len());
                if !spaces && self.column > WIDTH && inner && c.get(i + 1) != Some(&' ') {
                    self.fold();
                } else {
                    write(self, ch);
                }
                spaces = true;
            } else {
                write(self, ch);
                spaces = false;
            }
        }
    }

    /// Double-quoted text, with libyaml's escapes and folds.
    fn double(&mut self, c: &[char]) {
        let mut spaces = false;
        for (i, &ch) in c.iter().enumerate() {
            if !printable(ch) || ch == '\u{FEFF}' || is_break(ch) || ch == '"' || ch == '\\' {
                self.put('\\');
                match ch {
                    '\0' => self.put('0'),
                    '\u{7}' => self.put('a'),
                    '\u{8}' => self.put('b'),
                    '\t' => self.put('t'),
                    '\n' => self.put('n'),
                    '\u{b}' => self.put('v'),
                    '\u{c}' => self.put('f'),
                    '\r' => self.put('r'),
                    '\u{1b}' => self.put('e'),
                    '"' => self.put('"'),
                    '\\' => self.put('\\'),
                    '\u{85}' => self.put('N'),
                    '\u{a0}' => self.put('_'),
                    '\u{2028}' => self.put('L'),
                    '\u{2029}' => self.put('P'),
                    c if (c as u32) <= 0xFF => self.put_str(&format!("x{:02X}", c as u32)),
                    c if (c as u32) <= 0xFFFF => self.put_str(&format!("u{:04X}", c as u32)),
                    c => self.put_str(&format!("U{:08X}", c as u32)),
                }
                spaces = false;
            } else if ch == ' ' {
                if !spaces && self.column > WIDTH && i != 0 && i + 1 != c.len() {
                    self.fold();
                    if c.get(i + 1) == Some(&' ') {
                        self.put('\\');
                    }
                } else {
                    self.put(ch);
                }
                spaces = true;
            } else {
                self.put(ch);
                spaces = false;
            }
        }
    }
}
