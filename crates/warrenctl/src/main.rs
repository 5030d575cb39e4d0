//! warrenctl: rabbitmqctl's everyday commands for Warren, carried out
//! through the management HTTP API (so it works wherever the API is
//! reachable, with the API's users and permissions). Listings print a
//! header row and tab-separated rows, as rabbitmqctl does, or JSON with
//! `--json`; list commands take rabbitmqctl's column names.

mod api;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::{json, Value};

use api::{Api, CtlError};

#[derive(Debug, Parser)]
#[command(
    name = "warrenctl",
    version,
    about = "Manage a Warren broker through its HTTP API"
)]
struct Cli {
    /// The management API's base URL.
    #[arg(long, env = "WARRENCTL_URL", default_value = "http://127.0.0.1:15672")]
    url: String,
    #[arg(short = 'u', long, env = "WARRENCTL_USER", default_value = "guest")]
    user: String,
    #[arg(long, env = "WARRENCTL_PASSWORD", default_value = "guest")]
    password: String,
    /// The vhost the command works in.
    #[arg(short = 'p', long, default_value = "/")]
    vhost: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

/// The queues grow, shrink and rebalance act on: regular expressions
/// over vhost and queue names (rabbitmq-queues' options).
#[derive(Debug, clap::Args)]
struct Which {
    #[arg(long = "vhost-pattern", default_value = ".*")]
    vhost_pattern: String,
    #[arg(long = "queue-pattern", default_value = ".*")]
    queue_pattern: String,
}

impl Which {
    fn body(&self) -> Value {
        json!({ "vhost_pattern": self.vhost_pattern, "queue_pattern": self.queue_pattern })
    }
}

#[derive(Debug, Subcommand)]
#[command(rename_all = "snake_case")]
enum Command {
    /// The node's versions, listeners and totals.
    Status,
    /// The cluster's name and nodes, which are running, and partitions
    /// (rabbitmqctl cluster_status).
    ClusterStatus,
    /// Remove a stopped node from the cluster for good (rabbitmqctl
    /// forget_cluster_node); its queues go with it.
    ForgetClusterNode { node: String },
    /// Make this node (alone) a member of NODE's cluster (rabbitmqctl
    /// join_cluster); ADDRESS is NODE's inter-node listener (host:port).
    /// The node then restarts with the cluster's definitions: its own go.
    JoinCluster { node: String, address: String },
    /// Queues of the vhost (columns: name, messages, messages_ready, consumers, type, ...).
    ListQueues { columns: Vec<String> },
    /// Exchanges of the vhost (columns: name, type, durable, ...).
    ListExchanges { columns: Vec<String> },
    /// Bindings of the vhost (columns: source_name, destination_name, routing_key, ...).
    ListBindings { columns: Vec<String> },
    /// Connections to the vhost (columns: name, user, peer_host, protocol, ...).
    ListConnections { columns: Vec<String> },
    /// Consumers of the vhost's queues (columns: queue_name, channel_pid, consumer_tag, ack_required, prefetch_count, active, ...).
    ListConsumers { columns: Vec<String> },
    /// Channels of the vhost's connections (columns: pid, user, number, consumer_count, messages_unacknowledged, prefetch_count, confirm, ...).
    ListChannels { columns: Vec<String> },
    /// Virtual hosts.
    ListVhosts { columns: Vec<String> },
    /// Users and their tags.
    ListUsers { columns: Vec<String> },
    /// Add a user (no tags: give some with set_user_tags).
    AddUser { name: String, password: String },
    /// Delete a user.
    DeleteUser { name: String },
    /// Replace a user's tags.
    SetUserTags { name: String, tags: Vec<String> },
    /// Let a user use the vhost (-p).
    SetPermissions {
        user: String,
        configure: String,
        write: String,
        read: String,
    },
    /// Take a user's permissions in the vhost (-p) away.
    ClearPermissions { user: String },
    /// Users' permissions in the vhost (columns: user, configure, write, read).
    ListPermissions { columns: Vec<String> },
    /// A user's permissions in every vhost (columns: vhost, configure, write, read).
    ListUserPermissions { user: String },
    /// Limit the routing keys a user may publish (WRITE) and bind (READ)
    /// with on a topic exchange of the vhost (-p): regular expressions that
    /// may name {username}, {vhost} and {client_id}.
    SetTopicPermissions {
        user: String,
        exchange: String,
        write: String,
        read: String,
    },
    /// Remove a user's topic permissions in the vhost (-p): on EXCHANGE
    /// only, or on all exchanges.
    ClearTopicPermissions { user: String, exchange: Option<String> },
    /// Topic permissions in the vhost (columns: user, exchange, write, read).
    ListTopicPermissions { columns: Vec<String> },
    /// A user's topic permissions in every vhost (columns: vhost, exchange, write, read).
    ListUserTopicPermissions { user: String },
    /// Set a policy in the vhost: queues and exchanges whose names match
    /// PATTERN get DEFINITION (JSON, e.g. '{"max-length":1000}').
    SetPolicy {
        name: String,
        pattern: String,
        definition: String,
        /// The highest priority among matching policies applies.
        #[arg(long, default_value_t = 0)]
        priority: i64,
        /// queues, exchanges or all.
        #[arg(long = "apply-to", default_value = "all")]
        apply_to: String,
    },
    /// Remove a policy from the vhost.
    ClearPolicy { name: String },
    /// Policies of the vhost (columns: vhost, name, pattern, apply-to, definition, priority).
    ListPolicies { columns: Vec<String> },
    /// Add a virtual host.
    AddVhost { name: String },
    /// Delete a virtual host and everything in it.
    DeleteVhost { name: String },
    /// Delete a queue of the vhost.
    DeleteQueue { name: String },
    /// A member (replica) of quorum queue QUEUE (vhost -p) on NODE
    /// (rabbitmq-queues add_member).
    AddMember { queue: String, node: String },
    /// Remove quorum queue QUEUE's member on NODE (rabbitmq-queues
    /// delete_member); a leader hands its leadership on first.
    DeleteMember { queue: String, node: String },
    /// A replica of stream STREAM (vhost -p) on NODE (rabbitmq-streams
    /// add_replica).
    AddReplica { stream: String, node: String },
    /// Remove stream STREAM's member on NODE (rabbitmq-streams
    /// delete_replica); the last member stays.
    DeleteReplica { stream: String, node: String },
    /// One row per member of stream STREAM (rabbitmq-streams
    /// stream_status): role, node, epoch, offset, committed_offset,
    /// first_offset, readers, segments.
    StreamStatus { stream: String },
    /// Hand quorum queue QUEUE's leadership to its member on NODE.
    TransferLeadership { queue: String, node: String },
    /// Add a member on NODE to every matching quorum queue without one
    /// (rabbitmq-queues grow): STRATEGY "all", or "even" (only queues with
    /// an even number of members).
    Grow {
        node: String,
        strategy: String,
        #[command(flatten)]
        which: Which,
        /// Print only the queues where it failed.
        #[arg(long = "errors-only")]
        errors_only: bool,
    },
    /// Remove NODE's member from every matching quorum queue that has
    /// another (rabbitmq-queues shrink).
    Shrink {
        node: String,
        #[command(flatten)]
        which: Which,
        /// Print only the queues where it failed.
        #[arg(long = "errors-only")]
        errors_only: bool,
    },
    /// Spread quorum queues' leaders over their members' nodes
    /// (rabbitmq-queues rebalance quorum); TYPE is "quorum" or "all".
    Rebalance {
        #[arg(default_value = "quorum")]
        kind: String,
        #[command(flatten)]
        which: Which,
    },
    /// A quorum queue's leader, members and the members online.
    QuorumStatus { queue: String },
    /// Remove a queue's ready messages.
    PurgeQueue { name: String },
    /// Close a connection (its name as list_connections shows it).
    CloseConnection { name: String, reason: String },
    /// Write the definitions to FILE ("-": standard output).
    ExportDefinitions { file: String },
    /// Load definitions from FILE ("-": standard input).
    ImportDefinitions { file: String },
    /// Replace the vhost's (-p) limits with DEFINITION (JSON, e.g.
    /// '{"max-connections": 64, "max-queues": 256}'; -1: no limit).
    SetVhostLimits { definition: String },
    /// Remove every limit of the vhost (-p).
    ClearVhostLimits,
    /// The vhost's (-p) limits.
    ListVhostLimits,
    /// Set some of a user's limits (JSON, e.g. '{"max-channels": 16}'),
    /// keeping the others.
    SetUserLimits { user: String, definition: String },
    /// Remove one of a user's limits (NAME, e.g. max-channels), or all.
    ClearUserLimits { user: String, name: String },
    /// Users' limits: USER's, or every user's that has any.
    ListUserLimits { user: Option<String> },
    /// Read the TLS certificate, key and CA files again (as SIGHUP does):
    /// new connections get them, open ones keep theirs.
    ReloadTls,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let api = Api::new(&cli.url, &cli.user, &cli.password);
    match run(&cli, &api) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn vh(v: &str) -> String {
    api::encode(v)
}

fn run(cli: &Cli, api: &Api) -> Result<(), CtlError> {
    let v = vh(&cli.vhost);
    let list = |path: String, columns: &[String], default: &[&str]| -> Result<(), CtlError> {
        let items = api.get(&path)?;
        let columns: Vec<String> = if columns.is_empty() {
            default.iter().map(|c| c.to_string()).collect()
        } else {
            columns.to_vec()
        };
        print_rows(&items, &columns, cli.json);
        Ok(())
    };
    match &cli.command {
        Command::Status => {
            let o = api.get("/api/overview")?;
            if cli.json {
                println!("{o:#}");
            } else {
                println!("Status of node {}", o["node"].as_str().unwrap_or(""));
                println!(
                    "Product: {} {}",
                    text(&o["product_name"]),
                    text(&o["product_version"])
                );
                println!("RabbitMQ API version: {}", text(&o["rabbitmq_version"]));
                for l in o["listeners"].as_array().into_iter().flatten() {
                    println!(
                        "Listener: {} on {}:{}",
                        text(&l["protocol"]),
                        text(&l["ip_address"]),
                        text(&l["port"])
                    );
                }
                for (k, val) in o["object_totals"].as_object().into_iter().flatten() {
                    println!("{k}: {}", text(val));
                }
                println!("messages: {}", text(&o["queue_totals"]["messages"]));
            }
            Ok(())
        }
        Command::ClusterStatus => {
            let o = api.get("/api/overview")?;
            let nodes = api.get("/api/nodes")?;
            let all: Vec<&Value> = nodes.as_array().into_iter().flatten().collect();
            // Each running node's partitions, as it reports them.
            let partitions: serde_json::Map<String, Value> = all
                .iter()
                .filter(|n| n["partitions"].as_array().is_some_and(|p| !p.is_empty()))
                .map(|n| (text(&n["name"]), n["partitions"].clone()))
                .collect();
            let names = |running: Option<bool>| -> Vec<String> {
                all.iter()
                    .filter(|n| running.is_none_or(|r| n["running"].as_bool() == Some(r)))
                    .map(|n| text(&n["name"]))
                    .collect()
            };
            if cli.json {
                let status = json!({
                    "cluster_name": o["cluster_name"],
                    "disk_nodes": names(None),
                    "running_nodes": names(Some(true)),
                    "partitions": partitions,
                });
                println!("{status:#}");
                return Ok(());
            }
            println!("Cluster status of node {} ...", text(&o["node"]));
            println!("Basics\n\nCluster name: {}\n", text(&o["cluster_name"]));
            println!("Disk Nodes\n");
            for n in names(None) {
                println!("{n}");
            }
            println!("\nRunning Nodes\n");
            for n in names(Some(true)) {
                println!("{n}");
            }
            println!("\nNetwork Partitions\n");
            if partitions.is_empty() {
                println!("(none)");
            }
            for (node, seen) in &partitions {
                let seen: Vec<String> = seen.as_array().into_iter().flatten().map(text).collect();
                println!("Node {node} cannot communicate with {}", seen.join(", "));
            }
            Ok(())
        }
        Command::ListQueues { columns } => list(format!("/api/queues/{v}"), columns, &["name", "messages"]),
        Command::ListExchanges { columns } => list(format!("/api/exchanges/{v}"), columns, &["name", "type"]),
        Command::ListBindings { columns } => list(
            format!("/api/bindings/{v}"),
            columns,
            &[
                "source_name",
                "source_kind",
                "destination_name",
                "destination_kind",
                "routing_key",
                "arguments",
            ],
        ),
        Command::ListConnections { columns } => list(
            format!("/api/vhosts/{v}/connections"),
            columns,
            &["user", "peer_host", "peer_port", "state"],
        ),
        Command::ListConsumers { columns } => list(
            format!("/api/consumers/{v}"),
            columns,
            &[
                "queue_name",
                "channel_pid",
                "consumer_tag",
                "ack_required",
                "prefetch_count",
            ],
        ),
        Command::ListChannels { columns } => list(
            format!("/api/vhosts/{v}/channels"),
            columns,
            &["pid", "user", "consumer_count", "messages_unacknowledged"],
        ),
        Command::ListVhosts { columns } => list("/api/vhosts".into(), columns, &["name"]),
        Command::ListUsers { columns } => list("/api/users".into(), columns, &["user", "tags"]),
        Command::AddUser { name, password } => {
            api.put(
                &format!("/api/users/{}", vh(name)),
                json!({"password": password, "tags": ""}),
            )?;
            println!("Adding user \"{name}\" ...");
            Ok(())
        }
        Command::DeleteUser { name } => api.delete(&format!("/api/users/{}", vh(name)), None),
        Command::JoinCluster { node, address } => {
            println!("Clustering node with {node}");
            api.post("/api/cluster/join", json!({"node": node, "address": address}))
        }
        Command::ForgetClusterNode { node } => {
            println!("Removing node {node} from the cluster");
            api.delete(&format!("/api/nodes/{}", vh(node)), None)
        }
        Command::SetUserTags { name, tags } => {
            let path = format!("/api/users/{}", vh(name));
            let mut u = api.get(&path)?;
            u["tags"] = json!(tags);
            if let Some(m) = u.as_object_mut() {
                m.remove("password");
            }
            api.put(&path, u)
        }
        Command::SetPermissions {
            user,
            configure,
            write,
            read,
        } => api.put(
            &format!("/api/permissions/{v}/{}", vh(user)),
            json!({"configure": configure, "write": write, "read": read}),
        ),
        Command::ClearPermissions { user } => api.delete(&format!("/api/permissions/{v}/{}", vh(user)), None),
        Command::ListPermissions { columns } => list(
            format!("/api/vhosts/{v}/permissions"),
            columns,
            &["user", "configure", "write", "read"],
        ),
        Command::ListUserPermissions { user } => list(
            format!("/api/users/{}/permissions", vh(user)),
            &[],
            &["vhost", "configure", "write", "read"],
        ),
        Command::SetTopicPermissions {
            user,
            exchange,
            write,
            read,
        } => {
            println!(
                "Setting topic permissions on \"{exchange}\" for user \"{user}\" in vhost \"{}\" ...",
                cli.vhost
            );
            api.put(
                &format!("/api/topic-permissions/{v}/{}", vh(user)),
                json!({"exchange": exchange, "write": write, "read": read}),
            )
        }
        Command::ReloadTls => api.post("/api/tls/reload", json!({})),
        Command::SetVhostLimits { definition } => {
            let new = limits_json(definition)?;
            println!(
                "Applying limits to vhost \"{}\" argument list: {definition} ...",
                cli.vhost
            );
            let path = format!("/api/vhost-limits/{v}");
            for name in limit_names(&api.get(&path)?) {
                if !new.contains_key(&name) {
                    api.delete(&format!("{path}/{}", vh(&name)), None)?;
                }
            }
            for (name, value) in new {
                api.put(&format!("{path}/{}", vh(&name)), json!({ "value": value }))?;
            }
            Ok(())
        }
        Command::ClearVhostLimits => {
            let path = format!("/api/vhost-limits/{v}");
            for name in limit_names(&api.get(&path)?) {
                api.delete(&format!("{path}/{}", vh(&name)), None)?;
            }
            Ok(())
        }
        Command::ListVhostLimits => print_limits(&api.get(&format!("/api/vhost-limits/{v}"))?, cli.json),
        Command::SetUserLimits { user, definition } => {
            for (name, value) in limits_json(definition)? {
                api.put(
                    &format!("/api/user-limits/{}/{}", vh(user), vh(&name)),
                    json!({ "value": value }),
                )?;
            }
            Ok(())
        }
        Command::ClearUserLimits { user, name } => {
            let path = format!("/api/user-limits/{}", vh(user));
            let names = if name == "all" {
                limit_names(&api.get(&path)?)
            } else {
                vec![name.clone()]
            };
            for n in names {
                api.delete(&format!("{path}/{}", vh(&n)), None)?;
            }
            Ok(())
        }
        Command::ListUserLimits { user } => {
            let path = match user {
                Some(u) => format!("/api/user-limits/{}", vh(u)),
                None => "/api/user-limits".into(),
            };
            print_limits(&api.get(&path)?, cli.json)
        }
        Command::ClearTopicPermissions { user, exchange } => {
            let path = format!("/api/topic-permissions/{v}/{}", vh(user));
            match exchange {
                None => api.delete(&path, None),
                Some(x) => api.delete(&format!("{path}/{}", vh(x)), None),
            }
        }
        Command::ListTopicPermissions { columns } => list(
            format!("/api/vhosts/{v}/topic-permissions"),
            columns,
            &["user", "exchange", "write", "read"],
        ),
        Command::ListUserTopicPermissions { user } => list(
            format!("/api/users/{}/topic-permissions", vh(user)),
            &[],
            &["vhost", "exchange", "write", "read"],
        ),
        Command::SetPolicy {
            name,
            pattern,
            definition,
            priority,
            apply_to,
        } => {
            let definition: Value = serde_json::from_str(definition)
                .map_err(|e| CtlError::Usage(format!("the definition is not JSON: {e}")))?;
            println!("Setting policy \"{name}\" for pattern \"{pattern}\" to \"{definition}\" with priority \"{priority}\" for vhost \"{}\" ...", cli.vhost);
            api.put(
                &format!("/api/policies/{v}/{}", vh(name)),
                json!({"pattern": pattern, "definition": definition, "priority": priority, "apply-to": apply_to}),
            )
        }
        Command::ClearPolicy { name } => api.delete(&format!("/api/policies/{v}/{}", vh(name)), None),
        Command::ListPolicies { columns } => list(
            format!("/api/policies/{v}"),
            columns,
            &["vhost", "name", "pattern", "apply-to", "definition", "priority"],
        ),
        Command::AddVhost { name } => api.put(&format!("/api/vhosts/{}", vh(name)), json!({})),
        Command::DeleteVhost { name } => api.delete(&format!("/api/vhosts/{}", vh(name)), None),
        Command::DeleteQueue { name } => api.delete(&format!("/api/queues/{v}/{}", vh(name)), None),
        Command::AddMember { queue, node } => {
            println!("Adding a replica for queue {queue} on node {node}...");
            let path = format!("/api/queues/quorum/{v}/{}/replicas/add", vh(queue));
            api.post(&path, json!({ "node": node }))
        }
        Command::DeleteMember { queue, node } => {
            println!("Removing a replica of queue {queue} on node {node}...");
            let path = format!("/api/queues/quorum/{v}/{}/replicas/delete", vh(queue));
            api.delete_with(&path, json!({ "node": node })).map(|_| ())
        }
        Command::AddReplica { stream, node } => {
            println!("Adding a replica for queue {stream} on node {node}...");
            let path = format!("/api/queues/stream/{v}/{}/replicas/add", vh(stream));
            api.post(&path, json!({ "node": node }))
        }
        Command::DeleteReplica { stream, node } => {
            println!("Removing a replica of queue {stream} on node {node}...");
            let path = format!("/api/queues/stream/{v}/{}/replicas/delete", vh(stream));
            api.delete_with(&path, json!({ "node": node })).map(|_| ())
        }
        Command::StreamStatus { stream } => {
            if !cli.json {
                println!("Status of stream {stream} ...");
            }
            list(
                format!("/api/queues/stream/{v}/{}/status", vh(stream)),
                &[],
                &[
                    "role",
                    "node",
                    "epoch",
                    "offset",
                    "committed_offset",
                    "first_offset",
                    "readers",
                    "segments",
                ],
            )
        }
        Command::TransferLeadership { queue, node } => {
            println!("Transferring the leadership of queue {queue} to node {node}...");
            let path = format!("/api/queues/quorum/{v}/{}/leader", vh(queue));
            api.post(&path, json!({ "node": node }))
        }
        Command::Grow {
            node,
            strategy,
            which,
            errors_only,
        } => {
            println!("Growing quorum queues on {node}...");
            let mut body = which.body();
            body["strategy"] = json!(strategy);
            let out = api.post_value(&format!("/api/queues/quorum/replicas/on/{}/grow", vh(node)), body)?;
            print_outcomes(&out, *errors_only, cli.json);
            Ok(())
        }
        Command::Shrink {
            node,
            which,
            errors_only,
        } => {
            println!("Shrinking quorum queues on {node}...");
            let body = which.body();
            let out = api.delete_with(
                &format!("/api/queues/quorum/replicas/on/{}/shrink", vh(node)),
                body,
            )?;
            print_outcomes(&out, *errors_only, cli.json);
            Ok(())
        }
        Command::Rebalance { kind, which } => {
            if !matches!(kind.as_str(), "quorum" | "all") {
                return Err(CtlError::Usage(format!(
                    "rebalance takes \"quorum\" or \"all\" (streams' leaders are not moved): not {kind}"
                )));
            }
            println!("Re-balancing leaders of quorum queues...");
            let out = api.post_value("/api/rebalance/queues", which.body())?;
            if cli.json {
                println!("{out:#}");
            } else {
                println!("node\tleaders");
                for (node, n) in out.as_object().into_iter().flatten() {
                    println!("{node}\t{n}");
                }
            }
            Ok(())
        }
        Command::QuorumStatus { queue } => {
            let q = api.get(&format!("/api/queues/{v}/{}", vh(queue)))?;
            if q["type"] != "quorum" {
                return Err(CtlError::Usage(format!("{queue} is not a quorum queue")));
            }
            let leader = q["leader"].as_str().unwrap_or("");
            let online: Vec<&str> = q["online"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_str())
                .collect();
            if cli.json {
                println!(
                    "{:#}",
                    json!({"leader": q["leader"], "members": q["members"], "online": q["online"]})
                );
            } else {
                println!("node\trole\tonline");
                for m in q["members"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|n| n.as_str())
                {
                    let role = if m == leader { "leader" } else { "follower" };
                    println!("{m}\t{role}\t{}", online.contains(&m));
                }
            }
            Ok(())
        }
        Command::PurgeQueue { name } => api.delete(&format!("/api/queues/{v}/{}/contents", vh(name)), None),
        Command::CloseConnection { name, reason } => {
            api.delete(&format!("/api/connections/{}", vh(name)), Some(reason))
        }
        Command::ExportDefinitions { file } => {
            let d = api.get("/api/definitions")?;
            let text = format!("{d:#}\n");
            if file == "-" {
                print!("{text}");
                Ok(())
            } else {
                std::fs::write(file, text).map_err(|e| CtlError::File(file.clone(), e))
            }
        }
        Command::ImportDefinitions { file } => {
            let text = if file == "-" {
                std::io::read_to_string(std::io::stdin()).map_err(|e| CtlError::File(file.clone(), e))?
            } else {
                std::fs::read_to_string(file).map_err(|e| CtlError::File(file.clone(), e))?
            };
            let d: Value =
                serde_json::from_str(&text).map_err(|e| CtlError::Usage(format!("{file}: {e}")))?;
            api.post("/api/definitions", d)
        }
    }
}

/// A limits argument: a JSON object.
fn limits_json(definition: &str) -> Result<serde_json::Map<String, Value>, CtlError> {
    match serde_json::from_str(definition) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(CtlError::Usage("the limits must be a JSON object".into())),
        Err(e) => Err(CtlError::Usage(format!("the limits are not JSON: {e}"))),
    }
}

/// The names of the limits a one-object listing holds.
fn limit_names(listing: &Value) -> Vec<String> {
    listing
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["value"].as_object())
        .flat_map(|m| m.keys().cloned())
        .collect()
}

/// A limits listing: owner and limits as JSON, one per line.
fn print_limits(listing: &Value, as_json: bool) -> Result<(), CtlError> {
    if as_json {
        println!("{listing}");
        return Ok(());
    }
    for e in listing.as_array().into_iter().flatten() {
        let owner = e
            .get("user")
            .or_else(|| e.get("vhost"))
            .map(text)
            .unwrap_or_default();
        println!("{owner}\t{}", e["value"]);
    }
    Ok(())
}

/// A JSON value as a table cell (strings bare, the rest as JSON).
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Array(a) => a.iter().map(text).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// rabbitmqctl's column names where the API's differ.
fn field<'a>(item: &'a Value, column: &str) -> &'a Value {
    let api_name = match column {
        "source_name" => "source",
        "destination_name" => "destination",
        "destination_kind" => "destination_type",
        "user" if item.get("user").is_none() => "name",
        other => other,
    };
    // rabbitmqctl's pids are Erlang processes; the API's names stand in.
    let nested = match column {
        "queue_name" => Some(("queue", "name")),
        "channel_pid" => Some(("channel_details", "name")),
        _ => None,
    };
    if let Some((outer, inner)) = nested {
        return item.get(outer).and_then(|o| o.get(inner)).unwrap_or(&Value::Null);
    }
    if column == "pid" {
        return item.get("name").unwrap_or(&Value::Null);
    }
    if column == "source_kind" {
        return &Value::Null;
    }
    item.get(api_name).unwrap_or(&Value::Null)
}

/// `grow` and `shrink`'s outcome per queue, as rabbitmq-queues prints it.
fn print_outcomes(out: &Value, errors_only: bool, as_json: bool) {
    let rows: Vec<&Value> = out
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| !errors_only || r["result"] != "ok")
        .collect();
    if as_json {
        println!("{:#}", json!(rows));
        return;
    }
    println!("vhost\tname\tsize\tresult");
    for r in rows {
        println!(
            "{}\t{}\t{}\t{}",
            r["vhost"].as_str().unwrap_or(""),
            r["name"].as_str().unwrap_or(""),
            r["size"],
            r["result"].as_str().unwrap_or("")
        );
    }
}

fn print_rows(items: &Value, columns: &[String], as_json: bool) {
    let rows = items.as_array().cloned().unwrap_or_default();
    if as_json {
        let picked: Vec<Value> = rows
            .iter()
            .map(|r| {
                let mut m = serde_json::Map::new();
                for c in columns {
                    let v = if c == "source_kind" {
                        json!("exchange")
                    } else {
                        field(r, c).clone()
                    };
                    m.insert(c.clone(), v);
                }
                Value::Object(m)
            })
            .collect();
        println!("{}", Value::Array(picked));
        return;
    }
    println!("{}", columns.join("\t"));
    for r in &rows {
        let cells: Vec<String> = columns
            .iter()
            .map(|c| {
                if c == "source_kind" {
                    "exchange".into()
                } else {
                    text(field(r, c))
                }
            })
            .collect();
        println!("{}", cells.join("\t"));
    }
}
