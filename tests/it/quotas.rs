//! Quotas through a real server and client, on a driven clock: calendar
//! periods (month ends, leap years, ISO weeks, `TZ` offsets), charging
//! after use (`RL.CHARGE`, `RL.ALLOWMANY CHARGE`), and `BLOCK` penalties,
//! which survive a snapshot and reach replicas.

use crate::common::*;
use redis::aio::MultiplexedConnection;
use turnstile::limiter::calendar::days_from_civil;
use turnstile::replication::Link;
use turnstile::{Clock, Nanos};

const MS: u64 = 1_000_000;
const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// The instant of a UTC date and time.
fn utc(y: i64, m: u32, d: u32, hh: u64, mm: u64) -> Nanos {
    let days = days_from_civil(y, m, d) as u64;
    Nanos((days * 86_400 + hh * 3_600 + mm * 60) * Nanos::PER_SEC)
}

async fn at(t: Nanos) -> (Server, MultiplexedConnection) {
    let srv = Server::start_at(t, |_| {}).await;
    let con = srv.client().await;
    (srv, con)
}

async fn allow(con: &mut MultiplexedConnection, args: &[&str]) -> Vec<i64> {
    let mut a = vec!["RL.ALLOW"];
    a.extend_from_slice(args);
    q(con, &a).await
}

fn set(srv: &Server, t: Nanos) {
    srv.clock.set(t);
}

/// Done when: `RL.ALLOW k 10 1mo ALGO fixed` resets at the first of the
/// next month, 00:00 UTC, whatever the month's length.
#[tokio::test]
async fn a_monthly_quota_resets_on_the_first_at_midnight_utc() {
    let (srv, mut con) = at(utc(2026, 1, 31, 23, 0)).await;
    let k = ["k", "10", "1mo", "ALGO", "fixed"];
    assert_eq!(allow(&mut con, &k).await, vec![1, 10, 9, -1, HOUR_MS]);
    for _ in 0..9 {
        assert_eq!(allow(&mut con, &k).await[0], 1);
    }
    assert_eq!(allow(&mut con, &k).await, vec![0, 10, 0, HOUR_MS, HOUR_MS]);
    // One millisecond before February: still January's quota.
    set(&srv, Nanos(utc(2026, 2, 1, 0, 0).0 - MS));
    assert_eq!(allow(&mut con, &k).await, vec![0, 10, 0, 1, 1]);
    // February 2026 has 28 days: the next reset is March 1st.
    set(&srv, utc(2026, 2, 1, 0, 0));
    assert_eq!(allow(&mut con, &k).await, vec![1, 10, 9, -1, 28 * DAY_MS]);
    // The key lives until its window ends, not a nominal 30 days.
    let pttl: i64 = q(&mut con, &["PTTL", "k"]).await;
    assert_eq!(pttl, 28 * DAY_MS);
    srv.shutdown().await;
}

#[tokio::test]
async fn leap_years_and_year_ends_follow_the_calendar() {
    let (srv, mut con) = at(utc(2024, 2, 28, 12, 0)).await;
    // 2024 is a leap year: February ends on the 29th.
    let d = allow(&mut con, &["m", "5", "1mo", "ALGO", "fixed"]).await;
    assert_eq!(d[4], DAY_MS + 12 * HOUR_MS);
    let y = allow(&mut con, &["y", "5", "1y", "ALGO", "fixed"]).await;
    assert_eq!(
        y[4],
        (days_from_civil(2025, 1, 1) - days_from_civil(2024, 2, 28)) * DAY_MS - 12 * HOUR_MS
    );
    set(&srv, utc(2024, 2, 29, 23, 59));
    let d = allow(&mut con, &["m", "5", "1mo", "ALGO", "fixed"]).await;
    assert_eq!(d, vec![1, 5, 3, -1, 60_000]);
    // 2100 is not a leap year (divisible by 100, not by 400); 2000 was.
    set(&srv, utc(2100, 2, 28, 0, 0));
    assert_eq!(
        allow(&mut con, &["m2", "5", "1mo", "ALGO", "fixed"]).await[4],
        DAY_MS
    );
    set(&srv, utc(2100, 12, 31, 23, 0));
    assert_eq!(
        allow(&mut con, &["y2", "5", "1y", "ALGO", "fixed"]).await[4],
        HOUR_MS
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn weeks_start_on_monday_and_days_at_midnight() {
    // 2026-11-26 is a Thursday: its ISO week ends Monday the 30th.
    let (srv, mut con) = at(utc(2026, 11, 26, 12, 0)).await;
    let w = allow(&mut con, &["w", "5", "1w", "ALGO", "fixed"]).await;
    assert_eq!(w[4], 3 * DAY_MS + 12 * HOUR_MS);
    let d = allow(&mut con, &["d", "5", "1d", "ALGO", "fixed"]).await;
    assert_eq!(d[4], 12 * HOUR_MS);
    // A week for the sliding algorithms is a plain 7 days.
    let g = allow(&mut con, &["g", "7", "1w", "ALGO", "gcra"]).await;
    assert_eq!(g[4], DAY_MS);
    srv.shutdown().await;
}

/// Done when: with `TZ`, the reset is at the offset's midnight.
#[tokio::test]
async fn tz_moves_the_boundaries_to_the_offsets_midnight() {
    // 21:00 UTC on January 31st is 23:00 at +02:00: February begins there
    // an hour later, at 22:00 UTC.
    let (srv, mut con) = at(utc(2026, 1, 31, 21, 0)).await;
    let east = ["e", "3", "1mo", "ALGO", "fixed", "TZ", "+02:00"];
    assert_eq!(allow(&mut con, &east).await, vec![1, 3, 2, -1, HOUR_MS]);
    // At -05:30 it is still 15:30 on the 31st: the month turns at 05:30 UTC.
    let west = ["w", "3", "1mo", "ALGO", "fixed", "TZ", "-05:30"];
    assert_eq!(allow(&mut con, &west).await[4], 8 * HOUR_MS + HOUR_MS / 2);
    let day = ["d", "3", "1d", "ALGO", "fixed", "TZ", "+09:00"];
    assert_eq!(allow(&mut con, &day).await[4], 18 * HOUR_MS);
    for _ in 0..2 {
        allow(&mut con, &east).await;
    }
    assert_eq!(allow(&mut con, &east).await[0], 0);
    set(&srv, utc(2026, 1, 31, 22, 0));
    // February at +02:00 ends 28 days later, at 22:00 UTC on the 28th.
    assert_eq!(allow(&mut con, &east).await, vec![1, 3, 2, -1, 28 * DAY_MS]);
    srv.shutdown().await;
}

#[tokio::test]
async fn unclear_periods_are_refused_with_a_reason() {
    let (srv, mut con) = at(utc(2026, 1, 15, 0, 0)).await;
    let cases: &[(&[&str], &str)] = &[
        (&["RL.ALLOW", "k", "10", "1mo"], "ERR period 1mo is a calendar period: only ALGO fixed counts by the calendar"),
        (&["RL.ALLOW", "k", "10", "1y", "ALGO", "gcra"], "ERR period 1y is a calendar period: only ALGO fixed counts by the calendar"),
        (&["RL.ALLOW", "k", "10", "1d", "ALGO", "window", "TZ", "+01:00"], "ERR TZ is only valid with ALGO fixed"),
        (&["RL.ALLOW", "k", "10", "1h", "ALGO", "fixed", "TZ", "+01:00"], "ERR TZ needs a calendar period: 1d, 1w, 1mo or 1y"),
        (&["RL.ALLOW", "k", "10", "2mo", "ALGO", "fixed"], "ERR invalid period '2mo': use whole seconds, a whole number with ms, s, m, h, d or w, or 1mo or 1y"),
        (&["RL.ALLOW", "k", "10", "1mo", "ALGO", "fixed", "TZ", "+19:00"], "ERR invalid TZ '+19:00': use +HH:MM or -HH:MM, at most 18:00"),
        (&["RL.ALLOW", "k", "10", "1w", "ALGO", "log"], "ERR period is too long for ALGO log (at most 6 days)"),
        (&["RL.ALLOW", "k", "10", "1s", "BLOCK", "0"], "ERR BLOCK must be positive"),
        (&["RL.CHARGE", "k", "10", "1s"], "ERR wrong number of arguments for 'rl.charge' command"),
        (&["RL.CHARGE", "k", "10", "1s", "0"], "ERR charge must be a positive integer"),
        (&["RL.CHARGE", "k", "10", "1s", "3", "COST", "2"], "ERR unknown option 'COST'"),
        (&["RL.ALLOWMANY", "CHARGE", "2", "LEASE", "k", "10", "1s"], "ERR CHARGE takes LIMIT clauses only: leases are held, not charged"),
    ];
    for (args, want) in cases {
        assert_eq!(&q_err(&mut con, args).await, want, "{args:?}");
    }
    let n: i64 = q(&mut con, &["DBSIZE"]).await;
    assert_eq!(n, 0, "a refused request writes nothing");
    srv.shutdown().await;
}

/// Done when: an `RL.CHARGE` overdraft denies the next `RL.ALLOW`, until
/// it has left its window.
#[tokio::test]
async fn a_charge_overdraft_denies_until_it_leaves_the_window() {
    let (srv, mut con) = at(utc(2026, 3, 10, 0, 0)).await;
    for algo in ["fixed", "window", "gcra", "log"] {
        let key = format!("c:{algo}");
        let lim = [key.as_str(), "10", "10s", "ALGO", algo];
        let mut charge = vec!["RL.CHARGE", key.as_str(), "10", "10s", "4", "ALGO", algo];
        let d: Vec<i64> = q(&mut con, &charge).await;
        assert_eq!(&d[..4], &[1, 10, 6, -1], "{algo}: within the limit");
        charge[4] = "25";
        let d: Vec<i64> = q(&mut con, &charge).await;
        assert_eq!(&d[..3], &[0, 10, 0], "{algo}: overdrawn to 29 of 10");
        let wait = d[3];
        assert!(wait > 0, "{algo}");
        let next = allow(&mut con, &lim).await;
        assert_eq!(next[0], 0, "{algo}: the overdraft denies the next request");
        assert_eq!(next[3], wait, "{algo}: and says when it fits");
        srv.advance_ms(wait as u64 - 1);
        assert_eq!(allow(&mut con, &lim).await[0], 0, "{algo}: 1 ms early");
        srv.advance_ms(1);
        assert_eq!(
            allow(&mut con, &lim).await[0],
            1,
            "{algo}: fits at retry_after"
        );
        // Everything charged has left once the key's TTL has passed.
        let pttl: i64 = q(&mut con, &["PTTL", key.as_str()]).await;
        srv.advance_ms(pttl as u64);
        assert_eq!(allow(&mut con, &lim).await[2], 9, "{algo}: a fresh key");
    }
    srv.shutdown().await;
}

#[tokio::test]
async fn estimate_then_charge_or_refund_the_difference() {
    let (srv, mut con) = at(utc(2026, 5, 31, 12, 0)).await;
    let budget = ["t:key1", "1000", "1mo", "ALGO", "fixed"];
    // Estimate 300 before the call; the call used 450: charge 150 more.
    let d = allow(&mut con, &[&budget[..], &["COST", "300"]].concat()).await;
    assert_eq!(d[..3], [1, 1000, 700]);
    let d: Vec<i64> = q(
        &mut con,
        &["RL.CHARGE", "t:key1", "1000", "1mo", "150", "ALGO", "fixed"],
    )
    .await;
    assert_eq!(d[..3], [1, 1000, 550]);
    // Estimate 500, used 100: refund 400.
    allow(&mut con, &[&budget[..], &["COST", "500"]].concat()).await;
    let r: i64 = q(&mut con, &["RL.REFUND", "t:key1", "400"]).await;
    assert_eq!(r, 1);
    let d: Vec<i64> = q(
        &mut con,
        &["RL.PEEK", "t:key1", "1000", "1mo", "ALGO", "fixed"],
    )
    .await;
    assert_eq!(
        d[..3],
        [1, 1000, 449],
        "used 300 + 150 + 100 = 550 (and the peek's 1)"
    );
    // Usage never goes below empty: a refund of more than was charged.
    let _: i64 = q(&mut con, &["RL.REFUND", "t:key1", "100000"]).await;
    let d: Vec<i64> = q(
        &mut con,
        &["RL.PEEK", "t:key1", "1000", "1mo", "ALGO", "fixed"],
    )
    .await;
    assert_eq!(d[..3], [1, 1000, 999]);
    // The month ends at midnight, 12 hours from now.
    assert_eq!(d[4], 12 * HOUR_MS);
    srv.shutdown().await;
}

#[tokio::test]
async fn allowmany_charges_every_limit_and_names_the_binding_one() {
    let (srv, mut con) = at(utc(2026, 6, 1, 0, 0)).await;
    let many = |n: &'static str| {
        vec![
            "RL.ALLOWMANY",
            "CHARGE",
            n,
            "LIMIT",
            "user",
            "100",
            "1mo",
            "ALGO",
            "fixed",
            "LIMIT",
            "org",
            "30",
            "1d",
            "ALGO",
            "fixed",
        ]
    };
    let d: Vec<i64> = q(&mut con, &many("20")).await;
    assert_eq!(d, vec![1, 30, 10, -1, DAY_MS, 1], "org binds with 10 left");
    let d: Vec<i64> = q(&mut con, &many("20")).await;
    assert_eq!(
        d,
        vec![0, 30, 0, DAY_MS, DAY_MS, 1],
        "org overdrawn: 40 of 30"
    );
    // Both were charged, the overdrawn one too.
    let user: Vec<i64> = q(
        &mut con,
        &["RL.PEEK", "user", "100", "1mo", "ALGO", "fixed"],
    )
    .await;
    assert_eq!(user[2], 59);
    let org = allow(&mut con, &["org", "30", "1d", "ALGO", "fixed"]).await;
    assert_eq!(org[0], 0);
    srv.shutdown().await;
}

/// Done when: `BLOCK 4s` denies for 4 s after a denial, uncounted.
#[tokio::test]
async fn block_denies_for_its_duration_after_a_denial() {
    let (srv, mut con) = at(utc(2026, 7, 1, 0, 0)).await;
    let k = ["b", "2", "1s", "ALGO", "fixed", "BLOCK", "4s"];
    assert_eq!(allow(&mut con, &k).await[0], 1);
    assert_eq!(allow(&mut con, &k).await[0], 1);
    assert_eq!(allow(&mut con, &k).await, vec![0, 2, 0, 4_000, 4_000]);
    // The window has turned, but the block holds: denied, retry at its end.
    srv.advance_ms(1_500);
    assert_eq!(allow(&mut con, &k).await, vec![0, 2, 0, 2_500, 2_500]);
    // Any request on the key is blocked, with BLOCK or without.
    let plain = allow(&mut con, &["b", "2", "1s", "ALGO", "fixed"]).await;
    assert_eq!(plain[..4], [0, 2, 0, 2_500]);
    let state: Vec<redis::Value> = q(&mut con, &["RL.STATE", "b"]).await;
    let text = format!("{state:?}");
    assert!(text.contains("blocked_ms"), "{text}");
    srv.advance_ms(2_499);
    assert_eq!(allow(&mut con, &k).await[0], 0);
    srv.advance_ms(1);
    // Denials during the block were not counted: the key is full again.
    assert_eq!(allow(&mut con, &k).await, vec![1, 2, 1, -1, 1_000]);
    // A limit without BLOCK denies without blocking.
    let once = ["nb", "1", "1s", "ALGO", "window"];
    allow(&mut con, &once).await;
    assert_eq!(allow(&mut con, &once).await[0], 0);
    srv.advance_ms(2_000);
    assert_eq!(allow(&mut con, &once).await[0], 1);
    srv.shutdown().await;
}

/// redis-cell's `CL.THROTTLE` on a GCRA key under a block is limited
/// until the block ends, as `RL.ALLOW` is (not `WRONGTYPE`).
#[tokio::test]
async fn cl_throttle_honours_a_block() {
    let (srv, mut con) = at(utc(2026, 7, 1, 0, 0)).await;
    let k = ["g", "1", "1s", "ALGO", "gcra", "BLOCK", "10s"];
    allow(&mut con, &k).await;
    assert_eq!(allow(&mut con, &k).await[..4], [0, 1, 0, 10_000]);
    let t: Vec<i64> = q(&mut con, &["CL.THROTTLE", "g", "0", "1", "1"]).await;
    assert_eq!(t, vec![1, 1, 0, 10, 10]);
    srv.advance_ms(10_000);
    let t: Vec<i64> = q(&mut con, &["CL.THROTTLE", "g", "0", "1", "1"]).await;
    assert_eq!(t[..3], [0, 1, 0]);
    let state: Vec<redis::Value> = q(&mut con, &["RL.STATE", "g"]).await;
    assert!(!format!("{state:?}").contains("blocked_ms"), "{state:?}");
    srv.shutdown().await;
}

#[tokio::test]
async fn block_in_allowmany_blocks_the_denying_key_only() {
    let (srv, mut con) = at(utc(2026, 7, 1, 0, 0)).await;
    let many = [
        "RL.ALLOWMANY",
        "LIMIT",
        "ip",
        "100",
        "1s",
        "LIMIT",
        "user",
        "1",
        "1s",
        "ALGO",
        "gcra",
        "BLOCK",
        "10s",
    ];
    let d: Vec<i64> = q(&mut con, &many).await;
    assert_eq!(d[0], 1);
    let d: Vec<i64> = q(&mut con, &many).await;
    assert_eq!(
        (d[0], d[3], d[5]),
        (0, 10_000, 1),
        "user denied and blocked"
    );
    srv.advance_ms(5_000);
    let d: Vec<i64> = q(&mut con, &many).await;
    assert_eq!((d[0], d[3], d[5]), (0, 5_000, 1));
    let ip: Vec<i64> = q(&mut con, &["RL.PEEK", "ip", "100", "1s"]).await;
    assert_eq!(ip[0], 1, "the other key is not blocked");
    srv.advance_ms(5_000);
    let d: Vec<i64> = q(&mut con, &many).await;
    assert_eq!(d[0], 1);
    srv.shutdown().await;
}

#[tokio::test]
async fn an_overdrawing_charge_with_block_blocks() {
    let (srv, mut con) = at(utc(2026, 7, 1, 0, 0)).await;
    let d: Vec<i64> = q(
        &mut con,
        &[
            "RL.CHARGE",
            "o",
            "5",
            "1s",
            "9",
            "ALGO",
            "fixed",
            "BLOCK",
            "1m",
        ],
    )
    .await;
    assert_eq!(d[..4], [0, 5, 0, 60_000]);
    srv.advance_ms(30_000);
    let d = allow(&mut con, &["o", "5", "1s", "ALGO", "fixed"]).await;
    assert_eq!(d[..4], [0, 5, 0, 30_000]);
    srv.shutdown().await;
}

#[tokio::test]
async fn rl_charge_is_in_the_command_table() {
    let (srv, mut con) = at(utc(2026, 7, 1, 0, 0)).await;
    let keys: Vec<String> = q(
        &mut con,
        &[
            "COMMAND",
            "GETKEYS",
            "RL.CHARGE",
            "acct",
            "10",
            "1mo",
            "3",
            "ALGO",
            "fixed",
        ],
    )
    .await;
    assert_eq!(keys, vec!["acct"]);
    let keys: Vec<String> = q(
        &mut con,
        &[
            "COMMAND",
            "GETKEYS",
            "RL.ALLOWMANY",
            "CHARGE",
            "2",
            "LIMIT",
            "a",
            "1",
            "1s",
            "LIMIT",
            "b",
            "1",
            "1s",
        ],
    )
    .await;
    assert_eq!(keys, vec!["a", "b"]);
    // Queued in a transaction and run by EXEC, as any write.
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("RL.CHARGE")
        .arg("acct")
        .arg(10)
        .arg("1mo")
        .arg(12)
        .arg("ALGO")
        .arg("fixed")
        .cmd("RL.ALLOW")
        .arg("acct")
        .arg(10)
        .arg("1mo")
        .arg("ALGO")
        .arg("fixed");
    let (c, a): (Vec<i64>, Vec<i64>) = pipe.query_async(&mut con).await.unwrap();
    assert_eq!((c[0], a[0]), (0, 0));
    srv.shutdown().await;
}

/// A block and a calendar survive a snapshot and a restart, and the block
/// still ends when it should.
#[tokio::test]
async fn blocks_and_calendars_survive_a_snapshot() {
    let dir = std::env::temp_dir().join(format!("turnstile-quotas-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("dump.snap");
    let t0 = utc(2026, 1, 31, 21, 0);
    let srv = Server::start_at(t0, |c| c.snapshot = Some(path.clone())).await;
    let mut con = srv.client().await;
    let blocked = ["b", "1", "1h", "ALGO", "gcra", "BLOCK", "10s"];
    allow(&mut con, &blocked).await;
    assert_eq!(allow(&mut con, &blocked).await[0], 0);
    let month = ["m", "5", "1mo", "ALGO", "fixed", "TZ", "+02:00"];
    allow(&mut con, &month).await;
    srv.shutdown().await;
    let restarted = Server::start_at(Nanos(t0.0 + 4_000 * MS), |c| {
        c.snapshot = Some(path.clone())
    })
    .await;
    let mut con = restarted.client().await;
    let d = allow(&mut con, &["b", "1", "1h", "ALGO", "gcra"]).await;
    assert_eq!(
        d[..4],
        [0, 1, 0, HOUR_MS - 4_000],
        "the block and the hour beneath it"
    );
    let d = allow(&mut con, &month).await;
    assert_eq!(d, vec![1, 5, 3, -1, HOUR_MS - 4_000]);
    restarted.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A block reaches a replica with the state beneath it.
#[tokio::test]
async fn a_block_reaches_replicas() {
    let t0 = utc(2026, 7, 1, 0, 0);
    let primary = Server::start_at(t0, |_| {}).await;
    let port = primary.addr.port();
    let replica = Server::start_at(t0, |c| c.replicaof = Some(("127.0.0.1".into(), port))).await;
    let mut con = primary.client().await;
    let k = ["r", "1", "1s", "ALGO", "window", "BLOCK", "1m"];
    allow(&mut con, &k).await;
    assert_eq!(allow(&mut con, &k).await[0], 0);
    let end = primary.state().store.effects.offset();
    eventually("the replica applied the block", || {
        replica.state().replication.link() == Link::Up
            && replica.state().store.effects.offset() == end
    })
    .await;
    let mut rcon = replica.client().await;
    let d: Vec<i64> = q(&mut rcon, &["RL.PEEK", "r", "1", "1s", "ALGO", "window"]).await;
    assert_eq!(d[..4], [0, 1, 0, 60_000]);
    let now = replica.clock.now();
    let mut seen = None;
    for i in 0..replica.state().store.shard_count() {
        replica.state().store.for_each_in_shard(i, now, |k, e| {
            if k == b"r" {
                seen = Some(e.value.type_name());
            }
        });
    }
    assert_eq!(seen, Some("rl-window"));
    replica.shutdown().await;
    primary.shutdown().await;
}

/// Policy files: `calendar: true` on envoyproxy/ratelimit's units, `tz`
/// and `block`; `unit: month` alone keeps its 30 days.
#[tokio::test]
async fn policies_take_calendar_tz_and_block() {
    let dir = std::env::temp_dir().join(format!("turnstile-quota-policies-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("q.yaml"),
        "domain: api\n\
         descriptors:\n\
         \x20 - key: plan\n\
         \x20   value: free\n\
         \x20   rate_limit: {name: free_monthly, unit: month, calendar: true, tz: \"+02:00\", requests_per_unit: 2, block: 30s}\n\
         \x20 - key: plan\n\
         \x20   value: trial\n\
         \x20   shadow_mode: true\n\
         \x20   rate_limit: {name: trial_daily, unit: day, requests_per_unit: 1, block: 1h}\n\
         \x20 - key: plan\n\
         \x20   value: legacy\n\
         \x20   rate_limit: {name: legacy_monthly, unit: month, requests_per_unit: 2}\n",
    )
    .unwrap();
    let srv = Server::start_at(utc(2026, 1, 31, 21, 0), |c| c.policies = Some(dir.clone())).await;
    let mut con = srv.client().await;
    let free = ["RL.ALLOW", "u1", "POLICY", "free_monthly"];
    let d: Vec<i64> = q(&mut con, &free).await;
    assert_eq!(
        d,
        vec![1, 2, 1, -1, HOUR_MS],
        "February at +02:00 begins at 22:00 UTC"
    );
    let _: Vec<i64> = q(&mut con, &free).await;
    let d: Vec<i64> = q(&mut con, &free).await;
    assert_eq!(
        d[..4],
        [0, 2, 0, HOUR_MS],
        "blocked 30 s, the month ends later"
    );
    // A shadow policy lets a denial through, and blocks nothing.
    let trial = ["RL.ALLOW", "u2", "POLICY", "trial_daily"];
    for _ in 0..3 {
        let d: Vec<i64> = q(&mut con, &trial).await;
        assert_eq!(d[0], 1);
    }
    let state: Vec<redis::Value> = q(&mut con, &["RL.STATE", "u2"]).await;
    assert!(!format!("{state:?}").contains("blocked_ms"), "{state:?}");
    let state: Vec<redis::Value> = q(&mut con, &["RL.STATE", "u1"]).await;
    assert!(format!("{state:?}").contains("blocked_ms"), "{state:?}");
    // Epoch-aligned 30 days, as envoyproxy/ratelimit counts a month.
    let d: Vec<i64> = q(&mut con, &["RL.ALLOW", "u1", "POLICY", "legacy_monthly"]).await;
    let now_s = utc(2026, 1, 31, 21, 0).0 / Nanos::PER_SEC;
    let period = 30 * 86_400;
    assert_eq!(d[4], ((period - now_s % period) * 1_000) as i64);
    srv.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
