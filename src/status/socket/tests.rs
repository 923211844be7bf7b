//! Tests of the stats socket: parsing, filters, commands against a fake balancer and
//! the `show info` output.

use tokio_util::sync::CancellationToken;

use super::command::*;
use super::exec::*;
use super::info::*;
use crate::report::StatusReport;
use crate::status::csv::{self, Filter};
use crate::status::source::StatusSource;

fn words(s: &[&str]) -> Vec<String> {
    s.iter().map(|w| w.to_string()).collect()
}

#[test]
fn lines_split_into_commands_and_words() {
    assert_eq!(parse_line("show stat\n"), vec![words(&["show", "stat"])]);
    assert_eq!(
        parse_line("show info;show stat\r\n"),
        vec![words(&["show", "info"]), words(&["show", "stat"])]
    );
    assert_eq!(
        parse_line("  disable   server\texpress/gear-a ;; "),
        vec![words(&["disable", "server", "express/gear-a"])]
    );
    assert_eq!(
        parse_line(r"set x a\;b c\\d e\ f"),
        vec![words(&["set", "x", "a;b", r"c\d", "e f"])]
    );
    assert!(parse_line("\n").is_empty());
    assert!(parse_line(" ; ;").is_empty());
}

#[test]
fn commands() {
    let p = |s: &str| parse_command(&parse_line(s)[0]);
    assert_eq!(p("help"), Command::Help);
    assert_eq!(p("quit"), Command::Quit);
    assert_eq!(p("prompt"), Command::Prompt(None));
    assert_eq!(p("prompt i"), Command::Prompt(Some(Mode::Interactive)));
    assert_eq!(p("prompt n"), Command::Prompt(Some(Mode::NonInteractive)));
    assert!(matches!(p("prompt x"), Command::Reply(_)));
    assert_eq!(p("show info"), Command::ShowInfo);
    assert_eq!(p("show stat"), Command::ShowStat(Filter::default()));
    assert_eq!(
        p("disable server express/local-gear"),
        Command::SetServer {
            backend: "express".into(),
            server: "local-gear".into(),
            enable: false
        }
    );
    assert_eq!(
        p("enable server express/gear-web1-ns"),
        Command::SetServer {
            backend: "express".into(),
            server: "gear-web1-ns".into(),
            enable: true
        }
    );
    for bad in [
        "disable server",
        "disable server express",
        "enable server express/",
        "enable server /x",
    ] {
        assert_eq!(
            p(bad),
            Command::Reply("Require 'backend/server'.\n".into()),
            "{bad}"
        );
    }
    match p("frobnicate now") {
        Command::Unknown(t) => {
            assert!(t.starts_with(
                "Unknown command: 'frobnicate'. Please enter one of the following commands only:\n"
            ));
            assert!(t.contains("show stat"));
        }
        other => panic!("{other:?}"),
    }
    match p("show sess") {
        Command::Unknown(t) => {
            assert!(t.starts_with("Unknown command: 'show', but maybe"));
            assert!(t.contains("show info") && !t.contains("disable server"));
        }
        other => panic!("{other:?}"),
    }
    match p("\u{1b}[2Jx") {
        Command::Unknown(t) => assert!(!t.contains('\u{1b}')),
        other => panic!("{other:?}"),
    }
}

#[test]
fn show_stat_filters() {
    let p = |s: &str| parse_command(&parse_line(s)[0]);
    let all = Filter::default();
    assert_eq!(p("show stat -1 -1 -1"), Command::ShowStat(all.clone()));
    assert_eq!(
        p("show stat domain proxy -1 -1 -1"),
        Command::ShowStat(all.clone())
    );
    assert_eq!(
        p("show stat express 2 -1"),
        Command::ShowStat(Filter {
            iid: Some(csv::PROXY_ID),
            types: csv::TYPE_BACKEND,
            ..all.clone()
        })
    );
    assert_eq!(
        p("show stat 2 4 3 up"),
        Command::ShowStat(Filter {
            iid: Some(2),
            types: csv::TYPE_SERVER,
            sid: Some(3),
            hide_down: true,
            ..all.clone()
        })
    );
    assert_eq!(
        p("show stat no-maint"),
        Command::ShowStat(Filter {
            hide_maint: true,
            ..all.clone()
        })
    );
    // Two words are not a selector (HAProxy needs all three).
    assert_eq!(p("show stat 2 4"), Command::ShowStat(all.clone()));
    assert_eq!(
        p("show stat nosuch 1 1"),
        Command::Reply("No such proxy.\n".into())
    );
    assert!(matches!(p("show stat typed"), Command::Reply(_)));
    assert!(matches!(p("show stat domain dns"), Command::Reply(_)));
    assert_eq!(atoi("12abc"), 12);
    assert_eq!(atoi("-1"), -1);
    assert_eq!(atoi("x"), 0);
    assert_eq!(atoi(&"9".repeat(40)), 999_999_999_999_999_999);
}

/// A balancer with servers `local-gear` and `gear-web1-ns`, recording what is
/// enabled and disabled.
struct Fake {
    calls: std::sync::Mutex<Vec<(String, bool)>>,
}

impl StatusSource for Fake {
    fn report(&self) -> StatusReport {
        let backend = |name: &str| {
            serde_json::json!({
                "name": name, "addr": "127.0.0.1:1", "gear_dns": null, "state": "up",
                "in_subset": true, "last_check": null, "tunnels": 0, "sessions": 0,
                "sessions_max": 0, "requests_total": 0, "errors": 0,
                "connect_errors": 0, "response_errors": 0, "timeouts": 0,
                "responses": {"1xx": 0, "2xx": 0, "3xx": 0, "4xx": 0, "5xx": 0},
                "connections_open": 0, "connections_idle": 0
            })
        };
        serde_json::from_value(serde_json::json!({
            "version": "9.9.9", "pid": 42, "uptime_secs": 3661, "gear_uuid": null,
            "listen": {"proxy": "127.0.0.1:1", "status": "127.0.0.1:2"},
            "frontend": {
                "connections_current": 2, "connections_max": 2, "connections_total": 7,
                "connections_refused": 0, "client_timeouts": 0, "requests_current": 0,
                "requests_total": 9, "no_backend": 0, "connections_limit": 256,
                "responses": {"1xx": 0, "2xx": 9, "3xx": 0, "4xx": 0, "5xx": 0}
            },
            "backends": [backend("local-gear"), backend("gear-web1-ns")],
        }))
        .unwrap()
    }
    fn healthy(&self) -> bool {
        true
    }
    fn metrics(&self) -> Result<String, std::fmt::Error> {
        Ok(String::new())
    }
}

impl Source for Fake {
    async fn set_server(&self, server: &str, enable: bool) -> Result<(), AdminError> {
        match server {
            "local-gear" | "gear-web1-ns" => {
                self.calls.lock().unwrap().push((server.into(), enable));
                Ok(())
            }
            "quorum" => Err(AdminError::Refused("gearlb: no quorum.".into())),
            _ => Err(AdminError::NoSuchServer),
        }
    }
}

#[tokio::test]
async fn lines_as_haproxy_answers_them() {
    let fake = Fake {
        calls: Default::default(),
    };
    let stop = CancellationToken::new();
    let run = |line: &'static str, mode: Mode| {
        let (fake, stop) = (&fake, &stop);
        async move { run_line(line, mode, fake, stop).await }
    };
    // Success is an empty answer: just the empty line that ends it.
    let (out, mode, quit) = run(
        "disable server express/gear-web1-ns\n",
        Mode::NonInteractive,
    )
    .await;
    assert_eq!(
        (out.as_str(), mode, quit),
        ("\n", Mode::NonInteractive, false)
    );
    let (out, ..) = run(
        "enable server express/#1;disable server #2/local-gear",
        Mode::NonInteractive,
    )
    .await;
    assert_eq!(out, "\n\n");
    assert_eq!(
        *fake.calls.lock().unwrap(),
        [
            ("gear-web1-ns".to_string(), false),
            ("local-gear".to_string(), true),
            ("local-gear".to_string(), false)
        ]
    );
    for (line, answer) in [
        ("disable server express/nope", "No such server.\n\n"),
        ("disable server express/#9", "No such server.\n\n"),
        ("disable server stats/x", "No such server.\n\n"),
        ("disable server www/x", "No such backend.\n\n"),
        ("enable server express", "Require 'backend/server'.\n\n"),
        ("enable server express/quorum", "gearlb: no quorum.\n\n"),
    ] {
        assert_eq!(run(line, Mode::NonInteractive).await.0, answer, "{line}");
    }
    assert_eq!(fake.calls.lock().unwrap().len(), 3, "errors change nothing");

    // show info then show stat on one line: two blocks, each ended by an empty line.
    let (out, ..) = run("show info;show stat", Mode::NonInteractive).await;
    let (info, rest) = out.split_once("\n\n").unwrap();
    assert!(info.starts_with("Name: gearlb\nVersion: 9.9.9\n"), "{info}");
    assert!(info.contains("\nPid: 42\n") && info.contains("\nUptime: 0d 1h01m01s\n"));
    assert!(info.contains("\nUptime_sec: 3661\n") && info.contains("\nMaxconn: 256\n"));
    assert!(info.contains("\nCurrConns: 2\n") && info.contains("\nCumConns: 7\n"));
    assert!(rest.starts_with("# pxname,svname,"));
    assert!(rest.ends_with(",\n\n"));
    let backend = rest
        .lines()
        .find(|l| l.starts_with("express,BACKEND,"))
        .unwrap();
    assert_eq!(backend.split(',').nth(4), Some("0"), "scur");
    let (out, ..) = run("show stat express 4 2", Mode::NonInteractive).await;
    let rows: Vec<&str> = out.lines().skip(1).filter(|l| !l.is_empty()).collect();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].starts_with("express,gear-web1-ns,"));

    // Prompt mode: each answer followed by a prompt; `prompt` again leaves it.
    let (out, mode, _) = run("prompt", Mode::NonInteractive).await;
    assert_eq!((out.as_str(), mode), ("\n> ", Mode::Prompt));
    let (out, mode, _) = run("\n", Mode::Prompt).await;
    assert_eq!((out.as_str(), mode), ("\n> ", Mode::Prompt));
    let (out, mode, _) = run("help", Mode::Prompt).await;
    assert!(out.starts_with("The following commands are valid at this level:\n"));
    assert!(out.ends_with("\n\n> ") && mode == Mode::Prompt);
    let (_, mode, _) = run("prompt", Mode::Prompt).await;
    assert_eq!(mode, Mode::NonInteractive);
    let (out, _, quit) = run("show info;quit;show stat", Mode::Interactive).await;
    assert!(quit && !out.contains("pxname"), "nothing after quit");
    // An empty line outside a prompt gets the usage.
    let (out, ..) = run("\n", Mode::NonInteractive).await;
    assert!(out.starts_with("Unknown command.") && out.ends_with("\n\n"));
}

#[test]
fn uptime_as_haproxy() {
    assert_eq!(uptime(4), "0d 0h00m04s");
    assert_eq!(uptime(2 * 86400 + 3 * 3600 + 4 * 60 + 5), "2d 3h04m05s");
}

#[test]
fn answers_never_hold_an_empty_line() {
    assert_eq!(no_empty_lines("a\n\n\nb\n".into()), "a\nb\n");
    assert_eq!(no_empty_lines("\n".into()), "");
    assert_eq!(no_empty_lines(String::new()), "");
}
