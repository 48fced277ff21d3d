//! Pub/Sub through real clients: the `redis` crate's async `PubSub`
//! (RESP2), and raw RESP3 pushes. Byte-for-byte agreement with Redis is the
//! differential corpus's (`tests/compat/diff_cases/pubsub.txt`).

use std::time::Duration;

use crate::common::*;
use futures::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_reach_subscribers_through_the_redis_crate() {
    let srv = Server::start().await;
    let client = redis::Client::open(srv.url("", "")).unwrap();
    let mut sub = client.get_async_pubsub().await.expect("pubsub connection");
    sub.subscribe("orders").await.unwrap();
    sub.psubscribe("limits.*").await.unwrap();
    let mut publisher = srv.client().await;
    let n: i64 = q(&mut publisher, &["PUBLISH", "orders", "one"]).await;
    assert_eq!(n, 1);
    let n: i64 = q(&mut publisher, &["PUBLISH", "limits.api", "two"]).await;
    assert_eq!(n, 1);
    let numsub: Vec<redis::Value> = q(&mut publisher, &["PUBSUB", "NUMSUB", "orders"]).await;
    assert_eq!(ints(&redis::Value::Array(numsub[1..].to_vec())), [1]);
    let mut stream = sub.on_message();
    let mut got = Vec::new();
    for _ in 0..2 {
        let msg = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("a message within 10 s")
            .expect("the stream is open");
        let payload: String = msg.get_payload().unwrap();
        got.push((msg.get_channel_name().to_string(), payload));
    }
    assert_eq!(
        got,
        [
            ("orders".to_string(), "one".to_string()),
            ("limits.api".to_string(), "two".to_string())
        ]
    );
    drop(stream);
    drop(sub);
    // A subscriber that goes away is forgotten.
    eventually("the closed subscriber is forgotten", || {
        srv.state().pubsub.channel_count() == 0 && srv.state().pubsub.pattern_count() == 0
    })
    .await;
    let n: i64 = q(&mut publisher, &["PUBLISH", "orders", "three"]).await;
    assert_eq!(n, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_resp3_subscriber_is_woken_by_a_push() {
    let srv = Server::start().await;
    let mut sub = srv.raw().await;
    assert!(sub.call(&["HELLO", "3"]).await.starts_with('%'));
    assert_eq!(
        sub.call(&["SUBSCRIBE", "ch"]).await,
        ">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"
    );
    // RESP3 subscribers may run any command.
    assert_eq!(sub.call(&["SET", "k", "v"]).await, "+OK\r\n");
    let mut publisher = srv.raw().await;
    for i in 0..3 {
        let msg = format!("m{i}");
        assert_eq!(publisher.call(&["PUBLISH", "ch", &msg]).await, ":1\r\n");
        assert_eq!(
            sub.reply_text().await,
            format!(">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\n{msg}\r\n")
        );
    }
    // Publishing to itself: the message comes before the count.
    sub.send(&encode_words(&["PUBLISH", "ch", "me"])).await;
    assert_eq!(
        sub.reply_text().await,
        ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nme\r\n"
    );
    assert_eq!(sub.reply_text().await, ":1\r\n");
    let info: String = publisher.call(&["INFO", "stats"]).await;
    assert!(info.contains("pubsub_channels:1\r\n"), "{info}");
}
