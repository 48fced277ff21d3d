use proptest::prelude::*;

use super::*;

/// A small table: two plain commands, a container with two subcommands,
/// and a limiter command.
fn catalog() -> Catalog {
    Catalog::new([
        (
            "get",
            CatSet::READ.with(CatSet::STRING).with(CatSet::FAST),
            vec![],
        ),
        (
            "set",
            CatSet::WRITE.with(CatSet::STRING).with(CatSet::SLOW),
            vec![],
        ),
        (
            "client",
            CatSet::SLOW,
            vec![
                ("id", CatSet::SLOW.with(CatSet::CONNECTION)),
                (
                    "kill",
                    CatSet::ADMIN
                        .with(CatSet::DANGEROUS)
                        .with(CatSet::SLOW)
                        .with(CatSet::CONNECTION),
                ),
            ],
        ),
        (
            "rl.allow",
            CatSet::WRITE.with(CatSet::FAST).with(CatSet::RATELIMIT),
            vec![],
        ),
        ("select", CatSet::FAST.with(CatSet::CONNECTION), vec![]),
    ])
}

fn user(rules: &[&str]) -> Result<User, String> {
    let rules: Vec<&[u8]> = rules.iter().map(|r| r.as_bytes()).collect();
    let mut u = User::new(b"u");
    u.apply_all(&catalog(), &rules)?;
    Ok(u)
}

/// `ACL LIST`'s rules for `u`, as text.
fn described(u: &User) -> String {
    String::from_utf8(u.describe(&catalog())).expect("these rules are UTF-8")
}

fn rebuilt(u: &User) -> User {
    let text = described(u);
    let rules: Vec<&str> = text.split(' ').collect();
    let mut again = User::new(b"u");
    // The digests come back as `#hash` rules; the rest as written.
    again
        .apply_all(
            &catalog(),
            &rules.iter().map(|r| r.as_bytes()).collect::<Vec<_>>(),
        )
        .unwrap_or_else(|e| panic!("{text}: {e}"));
    again
}

#[test]
fn a_new_user_is_off_with_nothing_allowed() {
    let u = user(&[]).unwrap();
    assert_eq!(described(&u), "off resetchannels -@all");
    assert!(!u.accepts(b""));
    assert!(!u.root().may_run(0, false, None));
}

#[test]
fn rules_print_back_in_redis_canonical_order() {
    let u = user(&[
        "on",
        ">secret",
        "~t:*",
        "%R~r:*",
        "%W~w:*",
        "%RW~b:*",
        "&ch",
        "+@ratelimit",
        "+get",
    ])
    .unwrap();
    assert_eq!(
        described(&u),
        "on #2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b \
         ~t:* %R~r:* %W~w:* ~b:* resetchannels &ch -@all +@read +@ratelimit"
    );
    assert!(u.accepts(b"secret"));
    assert!(!u.accepts(b"secreT"));
    let default = Acl::new(None).default_user().load();
    assert_eq!(described(&default), "on nopass ~* &* +@all");
}

#[test]
fn a_container_rule_covers_its_subcommands_and_categories_fit_best() {
    let c = catalog();
    let u = user(&["+@all", "-@dangerous"]).unwrap();
    // Here @admin and @dangerous hold the same commands: the first in
    // ACL CAT's order that fits is printed, as Redis prints it.
    assert_eq!(u.command_rules(&c), "+@all -@admin");
    let kill = c.lookup(b"client|kill").unwrap();
    assert!(!u.root().may_run(kill, false, None));
    let u = user(&["-@all", "+client", "-client|kill"]).unwrap();
    assert_eq!(u.command_rules(&c), "-@all +client -client|kill");
    assert!(u
        .root()
        .may_run(c.lookup(b"client|id").unwrap(), false, None));
    assert!(!u.root().may_run(kill, false, None));
    // A first argument of a command without subcommands.
    let u = user(&["+select|0"]).unwrap();
    let select = c.lookup(b"select").unwrap();
    assert!(u.root().may_run(select, false, Some(b"0")));
    assert!(!u.root().may_run(select, false, Some(b"1")));
    assert_eq!(u.command_rules(&c), "-@all +select|0");
}

#[test]
fn errors_are_redis_words_and_change_nothing() {
    let e = |rules: &[&str]| user(rules).unwrap_err();
    assert_eq!(
        e(&["on", "bogus"]),
        "Error in ACL SETUSER modifier 'bogus': Syntax error"
    );
    assert_eq!(
        e(&["+nosuch"]),
        "Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL"
    );
    assert_eq!(
        e(&["-@nosuch"]),
        "Error in ACL SETUSER modifier '-@nosuch': Unknown command or category name in ACL"
    );
    assert!(e(&["allkeys", "~x"])
        .contains("Adding a pattern after the * pattern (or the 'allkeys' flag)"));
    assert!(e(&["&*", "&x"]).contains("(or the 'allchannels' flag)"));
    assert!(e(&["<nope"])
        .ends_with("The password you are trying to remove from the user does not exist"));
    assert!(e(&["#ABC"])
        .ends_with("exactly 64 characters and contain only lowercase hexadecimal characters"));
    assert!(e(&["+client|kill|x"]).ends_with("Allowing first-arg of a subcommand is not supported"));
    assert!(e(&["+get|"]).ends_with("Syntax error"));
    assert!(e(&["%X~a"]).ends_with("Syntax error"));
    assert!(e(&["%~a"]).ends_with("Syntax error"));
    assert!(e(&["~a b"]).ends_with("Syntax error"));
    assert_eq!(
        e(&["on", "(+get"]),
        "Unmatched parenthesis in acl selector starting at '(+get'."
    );
    // Inside a selector, Redis's words for the rule that failed, naming
    // the selector whole (joined from its arguments).
    assert_eq!(
        e(&["(on)"]),
        "Error in ACL SETUSER modifier '(on)': Syntax error"
    );
    assert_eq!(
        e(&["(+get", "+nosuch)"]),
        "Error in ACL SETUSER modifier '(+get +nosuch)': Unknown command or category name in ACL"
    );
    assert_eq!(
        e(&["(clearselectors)"]),
        "Error in ACL SETUSER modifier '(clearselectors)': Syntax error"
    );
    assert!(e(&["(~* ~a)"]).contains("(or the 'allkeys' flag)"));
    // A quote that never closes: Redis 7.0 keeps an empty selector.
    assert!(e(&["(\"abc)"]).ends_with("Syntax error"));
    // All or nothing: the valid rules before the bad one are not kept.
    let mut u = User::new(b"u");
    let before = u.clone();
    assert!(u
        .apply_all(&catalog(), &[&b"on"[..], b">x", b"+bogus"])
        .is_err());
    assert_eq!(u, before);
}

#[test]
fn keys_need_the_access_the_command_asks() {
    let u = user(&["%R~r:*", "%W~w:*", "~b:*"]).unwrap();
    assert!(u.root().may_access(b"r:1", Access::READ));
    assert!(!u.root().may_access(b"r:1", Access::READ_WRITE));
    assert!(u.root().may_access(b"w:1", Access::WRITE));
    assert!(!u.root().may_access(b"w:1", Access::READ));
    assert!(u.root().may_access(b"b:1", Access::READ_WRITE));
    assert!(u.root().may_access(b"r:1", Access::NONE));
    assert!(!u.root().may_access(b"x", Access::NONE));
    let u = user(&["&news.*"]).unwrap();
    assert!(u.may_use_channel(b"news.today", false));
    // A subscribed pattern matches an allowed pattern only literally.
    assert!(!u.may_use_channel(b"news.t*", true));
    assert!(u.may_use_channel(b"news.*", true));
}

#[test]
fn the_default_user_follows_requirepass() {
    let acl = Acl::new(Some(b"pw"));
    assert!(acl.auth_required());
    assert!(acl.authenticate(b"default", b"pw").is_some());
    assert!(acl.authenticate(b"default", b"other").is_none());
    acl.set_default_password(None);
    assert!(!acl.auth_required());
    assert!(acl.authenticate(b"default", b"anything").is_some());
    // A change reaches the cell a connection already holds.
    let cell = acl.default_user().clone();
    acl.set_user(&catalog(), b"default", &[b"-@all"]).unwrap();
    assert!(!cell.unrestricted());
    assert_eq!(acl.delete(&[b"default"]).len(), 0);
    acl.set_user(&catalog(), b"gw", &[b"on", b"nopass"])
        .unwrap();
    let gw = acl.get(b"gw").unwrap();
    assert_eq!(acl.delete(&[b"gw", b"nobody"]).len(), 1);
    assert!(gw.deleted());
}

/// A root rule, a `(...)` selector of root rules that fit in one (no
/// flags or passwords), or `clearselectors`.
fn rule() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => root_rule(),
        2 => prop::collection::vec(root_rule(), 0..4).prop_map(|r| format!("({})", r.join(" "))),
        1 => Just("clearselectors".to_string()),
    ]
}

fn root_rule() -> impl Strategy<Value = String> {
    let word = prop::sample::select(vec![
        "on",
        "off",
        "nopass",
        "resetpass",
        "reset",
        "allkeys",
        "resetkeys",
        "allchannels",
        "resetchannels",
        "allcommands",
        "nocommands",
        "+@all",
        "-@all",
        "+get",
        "-get",
        "+set",
        "-set",
        "+client",
        "-client",
        "+client|kill",
        "-client|kill",
        "+client|id",
        "+select|0",
        "+select|1",
        "-select",
        "+@read",
        "-@read",
        "+@write",
        "-@write",
        "+@ratelimit",
        "-@ratelimit",
        "+@dangerous",
        "-@dangerous",
        "+@connection",
        "-@connection",
        "sanitize-payload",
        "skip-sanitize-payload",
    ])
    .prop_map(str::to_string);
    prop_oneof![
        4 => word,
        1 => "[a-c]{1,4}".prop_map(|p| format!(">{p}")),
        1 => "[a-c*:()'\"]{1,4}".prop_map(|p| format!("~{p}")),
        1 => ("(R|W|RW)", "[a-c*:()'\"]{1,4}").prop_map(|(f, p)| format!("%{f}~{p}")),
        1 => "[a-c*()'\"]{1,4}".prop_map(|p| format!("&{p}")),
    ]
}

proptest! {
    /// Whatever rules SETUSER accepts, the rules ACL LIST prints rebuild
    /// a user who may do exactly the same (passwords as their digests),
    /// and whose rules print the same.
    #[test]
    fn listed_rules_rebuild_the_user(rules in prop::collection::vec(rule(), 0..12)) {
        let refs: Vec<&str> = rules.iter().map(String::as_str).collect();
        if let Ok(u) = user(&refs) {
            let again = rebuilt(&u);
            prop_assert_eq!(again.describe(&catalog()), u.describe(&catalog()));
            prop_assert_eq!(again.accepts(b"ab"), u.accepts(b"ab"));
            let c = catalog();
            prop_assert_eq!(again.selectors().count(), u.selectors().count());
            for (a, b) in again.selectors().zip(u.selectors()) {
                for id in 0..c.len() {
                    for arg in [None, Some(&b"0"[..]), Some(b"1")] {
                        prop_assert_eq!(a.may_run(id, false, arg), b.may_run(id, false, arg));
                    }
                }
                for key in [&b"a"[..], b"a:b", b"c*", b"zz"] {
                    for access in [Access::NONE, Access::READ, Access::WRITE, Access::READ_WRITE] {
                        prop_assert_eq!(a.may_access(key, access), b.may_access(key, access));
                    }
                    prop_assert_eq!(a.may_use_channel(key, false), b.may_use_channel(key, false));
                }
            }
        }
    }
}

fn parse_file(text: &str) -> Result<Vec<User>, String> {
    file::parse("users.acl", text.as_bytes(), &catalog())
}

const NO_CHANGE: &str =
    "WARNING: ACL errors detected, no change to the previously active ACL rules was performed";

#[test]
fn an_acl_file_reads_as_redis_reads_it() {
    let users = parse_file("\n  user a on nopass ~*  +get\t\r\n\r\nuser b\n").unwrap();
    let names: Vec<&[u8]> = users.iter().map(|u| &*u.name).collect();
    assert_eq!(names, [&b"a"[..], b"b"]);
    // `get` is the small table's one `@read` command.
    assert_eq!(
        described(&users[0]),
        "on nopass ~* resetchannels -@all +@read"
    );
    assert_eq!(described(&users[1]), "off resetchannels -@all");
}

#[test]
fn every_bad_line_of_an_acl_file_is_named() {
    let long = "x".repeat(1 << 20);
    for (text, error) in [
        ("# a comment\n", "users.acl:1 should start with user keyword followed by the username. "),
        ("user\n", "users.acl:1 should start with user keyword followed by the username. "),
        ("User a on\n", "users.acl:1 should start with user keyword followed by the username. "),
        ("user a on\nuser a off\n", "WARNING: Duplicate user 'a' found on line 2. "),
        ("user a\x0bb on\n", "users.acl:1: username 'a\x0bb' contains invalid characters. "),
        ("user a on +nosuch +get|x -nope\n", "users.acl:1: Error in applying operation '+nosuch': Unknown command or category name in ACL. users.acl:1: Error in applying operation '-nope': Unknown command or category name in ACL. "),
        ("user a on foo >pw bar\n", "users.acl:1: Syntax error. "),
        ("user a on\ruser b on nopass +@all\n", "users.acl:1: Syntax error. "),
        ("user a (+get ~x) (on)\n", "users.acl:1: Syntax error. "),
        ("user a (+get ~x) (+nosuch)\n", "users.acl:1: Error in applying operation '(+nosuch)': Unknown command or category name in ACL. "),
        // Redis 7.0.15 crashes on this line.
        ("user a on (~x +get) (+set\n", "users.acl:1: Unmatched parenthesis in selector definition. "),
        ("user a #abc\n", "users.acl:1: The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters. "),
    ] {
        assert_eq!(parse_file(text).unwrap_err(), format!("{error}{NO_CHANGE}"), "{text:?}");
    }
    // A huge line: its error quotes 128 bytes of it.
    let err = parse_file(&format!("user a +{long}\n")).unwrap_err();
    assert!(err.len() < 400, "{}", err.len());
    // A file of garbage: twenty errors, then a count.
    let err = parse_file(&"junk\n".repeat(10_000)).unwrap_err();
    assert!(err.contains("users.acl:20 should") && !err.contains("users.acl:21 "));
    assert!(
        err.ends_with(&format!("(9980 more errors) {NO_CHANGE}")),
        "{err}"
    );
}

#[test]
fn a_first_argument_with_a_space_or_line_break_is_refused() {
    for rule in ["+select|a b", "+select|0\r\nuser", "+select|0\n"] {
        assert_eq!(
            user(&[rule]).unwrap_err(),
            format!("Error in ACL SETUSER modifier '{rule}': Syntax error")
        );
    }
}

#[test]
fn an_acl_file_that_is_a_directory_or_endless_is_refused() {
    let dir = std::env::temp_dir().join(format!("turnstile-acl-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let err = file::read(&dir, &catalog()).unwrap_err();
    assert!(err.ends_with("': Is a directory"), "{err}");
    let big = dir.join("big.acl");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(file::MAX_FILE_BYTES + 1).unwrap();
    let err = file::read(&big, &catalog()).unwrap_err();
    assert!(err.ends_with("is larger than 64 MiB"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

proptest! {
    /// What `ACL SAVE` writes for any users reads back to the same users.
    #[test]
    fn saved_users_read_back_the_same(
        users in prop::collection::vec(prop::collection::vec(rule(), 0..10), 0..6),
    ) {
        let acl = Acl::new(None);
        for (i, rules) in users.iter().enumerate() {
            let refs: Vec<&[u8]> = rules.iter().map(|r| r.as_bytes()).collect();
            let _ = acl.set_user(&catalog(), format!("u{i}").as_bytes(), &refs);
        }
        let before = acl.users();
        let text = file::render(before.iter().map(|u| &**u), &catalog()).unwrap();
        let read = file::parse("f", &text, &catalog()).unwrap();
        let again = Acl::new(Some(b"ignored"));
        again.replace(read, None);
        let after = again.users();
        prop_assert_eq!(after.len(), before.len());
        for (a, b) in after.iter().zip(&before) {
            prop_assert_eq!(a.describe(&catalog()), b.describe(&catalog()));
        }
    }
}

#[test]
fn a_pattern_that_is_not_utf8_is_saved_as_given() {
    let acl = Acl::new(None);
    acl.set_user(&catalog(), b"bin", &[b"on", b"~k\xff*", b"&c\xfe"])
        .unwrap();
    let before = acl.users();
    let text = file::render(before.iter().map(|u| &**u), &catalog()).unwrap();
    let read = file::parse("f", &text, &catalog()).unwrap();
    let bin = read.iter().find(|u| &*u.name == b"bin").unwrap();
    assert!(bin.root().may_access(b"k\xff1", Access::READ_WRITE));
    assert!(bin.may_use_channel(b"c\xfe", false));
    assert_eq!(*bin, *acl.get(b"bin").unwrap().load());
}

#[test]
fn selectors_print_as_redis_prints_them_and_read_back() {
    let c = catalog();
    let u = user(&[
        "on",
        "nopass",
        "(~x*",
        "+get)",
        "(+set",
        "~y*)",
        "()",
        "(%R~r:* &ch* +@read)",
    ])
    .unwrap();
    assert_eq!(
        described(&u),
        // `get` is the small table's one `@read` command.
        "on nopass resetchannels -@all (~x* resetchannels -@all +@read) \
         (~y* resetchannels -@all +set) (resetchannels -@all) \
         (%R~r:* resetchannels &ch* -@all +@read)"
    );
    assert_eq!(rebuilt(&u), u);
    // GETUSER's fields of each selector.
    let sels = u.extra_selectors();
    assert_eq!(sels.len(), 4);
    assert_eq!(sels[3].command_rules(&c), "-@all +@read");
    assert_eq!(sels[3].key_rules(), "%R~r:*");
    assert_eq!(sels[3].channel_rules(), "&ch*");
    // Quotes inside a selector, as Redis's sdssplitargs reads them.
    let q = user(&["(~\"q:*\" '+get')"]).unwrap();
    assert_eq!(q.extra_selectors()[0].key_rules(), "~q:*");
    // clearselectors and reset drop them; the root selector stays.
    let cleared = user(&["+get", "(+set)", "clearselectors"]).unwrap();
    assert_eq!(described(&cleared), "off resetchannels -@all +@read");
    let reset = user(&["(+set)", "reset"]).unwrap();
    assert!(reset.extra_selectors().is_empty());
    // An ACL file line with selectors over several words.
    let users = parse_file("user a on (~x   +get)  ( +set ~y ) ()\n").unwrap();
    assert_eq!(
        described(&users[0]),
        "on resetchannels -@all (~x resetchannels -@all +@read) (~y resetchannels -@all +set) (resetchannels -@all)"
    );
}

#[test]
fn a_selector_is_merged_as_redis_merges_it() {
    let m = |rules: &[&str]| {
        let rules: Vec<&[u8]> = rules.iter().map(|r| r.as_bytes()).collect();
        merge_selectors_for_test(&rules)
    };
    assert_eq!(
        m(&["on", "(+get", "~x)", "off"]),
        Ok(vec!["on".into(), "(+get ~x)".into(), "off".into()])
    );
    // A second opening word starts the selector again (Redis drops the
    // first).
    assert_eq!(m(&["(~a", "(~b", "c)"]), Ok(vec!["(~b c)".to_string()]));
    assert_eq!(m(&["(~a", "+get", ""]), Err(0));
    assert_eq!(m(&["", "(", ")"]), Ok(vec!["".into(), "( )".into()]));
}

fn merge_selectors_for_test(rules: &[&[u8]]) -> Result<Vec<String>, usize> {
    super::user::merge_selectors(rules).map(|v| {
        v.iter()
            .map(|r| String::from_utf8_lossy(r).into_owned())
            .collect()
    })
}

#[test]
fn channels_are_covered_by_any_selector() {
    let old = user(&["&a", "(&b)"]).unwrap();
    assert!(user(&["&b", "(&a)"]).unwrap().channels_cover(&old));
    assert!(!user(&["&a"]).unwrap().channels_cover(&old));
    assert!(user(&["(&*)"]).unwrap().channels_cover(&old));
    assert!(!user(&["&a"])
        .unwrap()
        .channels_cover(&user(&["(&*)"]).unwrap()));
    let u = user(&["&a", "(&b*)"]).unwrap();
    assert!(u.may_use_channel(b"b1", false));
    assert!(!u.may_use_channel(b"c", false));
}

#[test]
fn hostile_selectors_get_a_clear_error() {
    // Ten thousand rules in one selector: taken, and printed back.
    let mut rules = String::from("(");
    for i in 0..10_000 {
        rules.push_str(&format!("~k{i} "));
    }
    rules.push_str("+get)");
    let u = user(&[&rules]).unwrap();
    assert_eq!(rebuilt(&u), u);
    // More selectors than a user may have.
    let many = vec!["()"; MAX_SELECTORS + 1];
    assert_eq!(
        user(&many).unwrap_err(),
        "Error in ACL SETUSER modifier '()': A user can have at most 1024 selectors"
    );
    assert_eq!(
        user(&many[1..]).unwrap().extra_selectors().len(),
        MAX_SELECTORS
    );
    // Line breaks and NUL inside a selector's rules, unbalanced words.
    for bad in [
        "(~a\r\nuser x on)",
        "(~a\0b)",
        "(+get|a\nb)",
        "(\"a)",
        "(')",
        "((+get))",
    ] {
        assert!(user(&[bad]).is_err(), "{bad:?}");
    }
    // A rule ending in `)` inside a selector could not be printed back.
    for bad in [
        "(~a) +get)",
        "(%R~))",
        "(&x) ~y)",
        "(+select|0) ~a)",
        "(~'a)')",
    ] {
        assert!(
            user(&[bad])
                .unwrap_err()
                .ends_with("ACL LIST and ACL SAVE could not print it back"),
            "{bad:?}"
        );
    }
    let fine = user(&["~a)", "(~(b +get)"]).unwrap();
    assert_eq!(rebuilt(&fine), fine);
    for bad in [&["(", "(", "("][..], &["(+get"], &["("]] {
        assert!(
            user(bad).unwrap_err().starts_with("Unmatched parenthesis"),
            "{bad:?}"
        );
    }
}

#[test]
fn a_quote_inside_a_selector_rule_is_refused() {
    // `(~'a"b' +get)` would print as `(~a"b ...)`, whose quote reads back
    // as the start of a quoted word that never closes.
    for bad in ["(~'a\"b' +get)", "(~\"a'b\" +get)", "(&'x\"' +get)"] {
        assert!(
            user(&[bad])
                .unwrap_err()
                .ends_with("ACL LIST and ACL SAVE could not print it back"),
            "{bad:?}"
        );
    }
}
