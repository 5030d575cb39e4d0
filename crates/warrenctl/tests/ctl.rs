//! warrenctl, the binary, against a Warren started in-process: declares
//! and lists through the HTTP API, rabbitmqctl's columns and exit codes,
//! and definitions out and back in.

use std::process::Command;

/// A broker of its own for each test (they run in parallel).
async fn broker() -> (warren_server::Running, std::path::PathBuf) {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("warrenctl-it-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = warren_server::Config::loopback(dir.clone());
    (warren_server::start(config).await.expect("broker starts"), dir)
}

/// Run warrenctl: (exit code, standard output, standard error).
async fn ctl(port: u16, args: &[&str]) -> (i32, String, String) {
    let url = format!("http://127.0.0.1:{port}");
    let mut all = vec!["--url".to_string(), url];
    all.extend(args.iter().map(|a| a.to_string()));
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_warrenctl"))
            .args(&all)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn warrenctl_manages_a_broker_over_http() {
    let (running, dir) = broker().await;
    let port = running.http_addr.unwrap().port();
    assert_eq!(ctl(port, &["add_vhost", "shop"]).await.0, 0);
    assert_eq!(ctl(port, &["add_user", "clerk", "pw"]).await.0, 0);
    assert_eq!(ctl(port, &["set_user_tags", "clerk", "management"]).await.0, 0);
    assert_eq!(
        ctl(
            port,
            &["-p", "shop", "set_permissions", "clerk", ".*", ".*", ".*"]
        )
        .await
        .0,
        0
    );
    // A queue made through the API's neighbour command set.
    let (code, _, err) = ctl(port, &["-p", "shop", "list_queues"]).await;
    assert_eq!(code, 0, "{err}");
    running
        .ctx
        .broker
        .vhost("shop")
        .unwrap()
        .declare_queue(
            warren_core::decl::QueueDecl {
                name: "orders".into(),
                durable: true,
                exclusive: false,
                auto_delete: false,
                arguments: Default::default(),
            },
            0,
        )
        .unwrap();
    let (_, out, _) = ctl(
        port,
        &["-p", "shop", "list_queues", "name", "messages", "durable"],
    )
    .await;
    assert_eq!(out, "name\tmessages\tdurable\norders\t0\ttrue\n");
    let (_, out, _) = ctl(port, &["-p", "shop", "--json", "list_queues", "name"]).await;
    assert_eq!(out.trim(), r#"[{"name":"orders"}]"#);
    // A consumer (a real client's), listed by list_consumers and
    // list_channels.
    let uri = format!(
        "amqp://guest:guest@127.0.0.1:{}/shop",
        running.amqp_addr.unwrap().port()
    );
    let conn = lapin::Connection::connect(&uri, Default::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    // Kept: lapin cancels a consumer it drops.
    let _consumer = ch
        .basic_consume(
            "orders".into(),
            "ctl-c".into(),
            Default::default(),
            Default::default(),
        )
        .await
        .unwrap();
    let (_, out, _) = ctl(
        port,
        &[
            "-p",
            "shop",
            "list_consumers",
            "queue_name",
            "consumer_tag",
            "ack_required",
        ],
    )
    .await;
    assert_eq!(
        out,
        "queue_name\tconsumer_tag\tack_required\norders\tctl-c\ttrue\n"
    );
    let mut channels = String::new();
    for _ in 0..100 {
        channels = ctl(port, &["-p", "shop", "list_channels", "number", "consumer_count"])
            .await
            .1;
        if channels == "number\tconsumer_count\n1\t1\n" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(channels, "number\tconsumer_count\n1\t1\n");
    conn.close(200, "done".into()).await.unwrap();
    let (_, out, _) = ctl(port, &["list_users"]).await;
    assert!(out.lines().any(|l| l == "clerk\tmanagement"), "{out}");
    let (_, out, _) = ctl(port, &["-p", "shop", "list_exchanges", "name", "type"]).await;
    assert!(out.lines().any(|l| l == "amq.topic\ttopic"), "{out}");
    // The new user's own view, with its own credentials.
    let (code, out, _) = ctl(
        port,
        &["-u", "clerk", "--password", "pw", "-p", "shop", "list_queues"],
    )
    .await;
    assert_eq!((code, out.lines().count()), (0, 2));
    // Wrong credentials: rabbitmqctl's "no permission" exit code.
    let (code, _, err) = ctl(port, &["--password", "nope", "list_queues"]).await;
    assert_eq!(code, 77, "{err}");
    // A missing queue: an error from the API, exit 70.
    let (code, _, err) = ctl(port, &["-p", "shop", "delete_queue", "nope"]).await;
    assert_eq!(code, 70);
    assert!(err.contains("404"), "{err}");
    // A policy set, listed, and applied to the queue.
    let (code, _, err) = ctl(
        port,
        &[
            "-p",
            "shop",
            "set_policy",
            "--priority",
            "2",
            "--apply-to",
            "queues",
            "cap",
            "^ord",
            r#"{"max-length":5}"#,
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = ctl(port, &["-p", "shop", "list_policies"]).await;
    assert_eq!(
        out,
        "vhost\tname\tpattern\tapply-to\tdefinition\tpriority\nshop\tcap\t^ord\tqueues\t{\"max-length\":5}\t2\n"
    );
    let (_, out, _) = ctl(port, &["-p", "shop", "list_queues", "name", "policy"]).await;
    assert_eq!(out, "name\tpolicy\norders\tcap\n");
    let (code, _, err) = ctl(port, &["-p", "shop", "set_policy", "bad", ".*", "{not json"]).await;
    assert_eq!(code, 64, "{err}");
    // Definitions out, the vhost deleted, definitions back in.
    let file = dir.join("defs.json");
    let f = file.to_str().unwrap().to_string();
    assert_eq!(ctl(port, &["export_definitions", &f]).await.0, 0);
    assert_eq!(ctl(port, &["delete_vhost", "shop"]).await.0, 0);
    let (_, out, _) = ctl(port, &["list_vhosts"]).await;
    assert!(!out.contains("shop"));
    assert_eq!(ctl(port, &["import_definitions", &f]).await.0, 0);
    let (_, out, _) = ctl(port, &["-p", "shop", "list_queues", "name"]).await;
    assert_eq!(out, "name\norders\n", "the queue came back with the definitions");
    let (_, out, _) = ctl(port, &["-p", "shop", "list_queues", "name", "policy"]).await;
    assert_eq!(out, "name\tpolicy\norders\tcap\n", "and its policy");
    assert_eq!(ctl(port, &["-p", "shop", "clear_policy", "cap"]).await.0, 0);
    let (_, out, _) = ctl(port, &["-p", "shop", "list_policies"]).await;
    assert_eq!(out.lines().count(), 1, "{out}");
    let (code, out, _) = ctl(port, &["status"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("Listener: amqp"), "{out}");
    // Unreachable: exit 69.
    let (code, _, _) = ctl(1, &["status"]).await;
    assert_eq!(code, 69);
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Permissions and topic permissions set, listed and cleared as
/// rabbitmqctl's commands of the same names do.
#[tokio::test(flavor = "multi_thread")]
async fn warrenctl_sets_lists_and_clears_topic_permissions() {
    let (running, dir) = broker().await;
    let port = running.http_addr.unwrap().port();
    let ok = |r: (i32, String, String)| {
        assert_eq!(r.0, 0, "{}", r.2);
        r.1
    };
    ok(ctl(port, &["add_user", "clerk", "pw"]).await);
    ok(ctl(port, &["set_permissions", "clerk", "^c", ".*", ".*"]).await);
    ok(ctl(
        port,
        &[
            "set_topic_permissions",
            "clerk",
            "amq.topic",
            "^{username}\\.",
            ".*",
        ],
    )
    .await);
    ok(ctl(port, &["set_topic_permissions", "clerk", "events", "^e", "^e"]).await);
    let out = ok(ctl(port, &["list_topic_permissions"]).await);
    assert_eq!(
        out,
        "user\texchange\twrite\tread\nclerk\tamq.topic\t^{username}\\.\t.*\nclerk\tevents\t^e\t^e\n"
    );
    let out = ok(ctl(port, &["list_user_topic_permissions", "clerk"]).await);
    assert!(
        out.starts_with("vhost\texchange\twrite\tread\n/\tamq.topic\t"),
        "{out}"
    );
    let out = ok(ctl(port, &["list_permissions"]).await);
    assert!(out.contains("clerk\t^c\t.*\t.*\n"), "{out}");
    let out = ok(ctl(port, &["list_user_permissions", "clerk"]).await);
    assert_eq!(out, "vhost\tconfigure\twrite\tread\n/\t^c\t.*\t.*\n");
    // One exchange's, then the rest.
    ok(ctl(port, &["clear_topic_permissions", "clerk", "amq.topic"]).await);
    let out = ok(ctl(port, &["list_topic_permissions", "exchange"]).await);
    assert_eq!(out, "exchange\nevents\n");
    assert_ne!(
        ctl(port, &["clear_topic_permissions", "clerk", "amq.topic"])
            .await
            .0,
        0
    );
    ok(ctl(port, &["clear_topic_permissions", "clerk"]).await);
    assert_eq!(
        ok(ctl(port, &["list_topic_permissions"]).await),
        "user\texchange\twrite\tread\n"
    );
    ok(ctl(port, &["clear_permissions", "clerk"]).await);
    assert!(!ok(ctl(port, &["list_permissions"]).await).contains("clerk"));
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Vhost and user limits set, listed and cleared as rabbitmqctl's
/// set_vhost_limits (the whole set replaced) and set_user_limits (merged)
/// do.
#[tokio::test(flavor = "multi_thread")]
async fn warrenctl_sets_lists_and_clears_limits() {
    let (running, dir) = broker().await;
    let port = running.http_addr.unwrap().port();
    let ok = |r: (i32, String, String)| {
        assert_eq!(r.0, 0, "{}", r.2);
        r.1
    };
    ok(ctl(
        port,
        &["set_vhost_limits", r#"{"max-connections": 64, "max-queues": 8}"#],
    )
    .await);
    assert_eq!(
        ok(ctl(port, &["list_vhost_limits"]).await),
        "/\t{\"max-connections\":64,\"max-queues\":8}\n"
    );
    ok(ctl(port, &["set_vhost_limits", r#"{"max-queues": 9}"#]).await);
    assert_eq!(
        ok(ctl(port, &["list_vhost_limits"]).await),
        "/\t{\"max-queues\":9}\n"
    );
    assert_eq!(
        running.ctx.broker.vhost("/").unwrap().limits().get("max-queues"),
        Some(9)
    );
    let (code, _, err) = ctl(port, &["set_vhost_limits", r#"{"max-channels": 1}"#]).await;
    assert_ne!(code, 0);
    assert!(err.contains("Unrecognised terms"), "{err}");
    ok(ctl(port, &["clear_vhost_limits"]).await);
    assert_eq!(ok(ctl(port, &["list_vhost_limits"]).await), "");

    ok(ctl(port, &["add_user", "clerk", "pw"]).await);
    ok(ctl(port, &["set_user_limits", "clerk", r#"{"max-channels": 2}"#]).await);
    ok(ctl(port, &["set_user_limits", "clerk", r#"{"max-connections": 3}"#]).await);
    assert_eq!(
        ok(ctl(port, &["list_user_limits"]).await),
        "clerk\t{\"max-channels\":2,\"max-connections\":3}\n"
    );
    ok(ctl(port, &["clear_user_limits", "clerk", "max-channels"]).await);
    assert_eq!(
        ok(ctl(port, &["list_user_limits", "clerk"]).await),
        "clerk\t{\"max-connections\":3}\n"
    );
    ok(ctl(port, &["clear_user_limits", "clerk", "all"]).await);
    assert_eq!(ok(ctl(port, &["list_user_limits"]).await), "");
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// cluster_status: a single node lists itself; a node of a cluster whose
/// other member is down lists both as disk nodes and itself running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_status_lists_disk_and_running_nodes() {
    let (running, dir) = broker().await;
    let port = running.http_addr.unwrap().port();
    let (code, out, err) = ctl(port, &["cluster_status"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("Cluster status of node warren@localhost ..."),
        "{out}"
    );
    assert!(out.contains("Running Nodes\n\nwarren@localhost\n"), "{out}");
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);

    let dir = std::env::temp_dir().join(format!("warrenctl-it-{}-cluster", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = warren_server::Config::loopback(dir.clone());
    config.node_name = "warren@a".into();
    config.cluster = Some(warren_node::config::cluster::ClusterSettings {
        name: "ctl".into(),
        secret: Some("s".into()),
        listen: warren_node::config::Listen(Some("127.0.0.1:0".parse().unwrap())),
        peers: vec![warren_node::config::cluster::PeerConfig {
            node: "warren@b".into(),
            // Nobody listens there.
            address: "127.0.0.1:9".into(),
        }],
        ..Default::default()
    });
    let running = warren_server::start(config).await.expect("broker starts");
    let port = running.http_addr.unwrap().port();
    let (code, out, err) = ctl(port, &["--json", "cluster_status"]).await;
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["cluster_name"], "ctl");
    assert_eq!(v["disk_nodes"], serde_json::json!(["warren@a", "warren@b"]));
    assert_eq!(v["running_nodes"], serde_json::json!(["warren@a"]));
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
