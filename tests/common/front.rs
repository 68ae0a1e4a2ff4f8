//! A front Envoy in front of gateways under test: what a load balancer or ingress proxy does. One
//! config shape for every test that needs one (rolling restarts, idle pools, health checkers).

/// What the front Envoy does.
pub struct Front<'a> {
    pub admin: u16,
    /// The front listener clients send to (`None`: a health checker only, no traffic).
    pub listen: Option<u16>,
    /// Gateways: (traffic port, health-check port).
    pub gateways: &'a [(u16, u16)],
    /// Talk HTTP/2 to the gateways (a keep-alive pool either way; never retries).
    pub upstream_h2: bool,
    /// Active health check of each gateway: path and interval (e.g. `0.2s`). `Envoy/HC` user agent.
    pub health_check: Option<(&'a str, &'a str)>,
    /// Route timeout (e.g. `30s`; `0s`: none, for long-lived streams).
    pub route_timeout: &'a str,
    /// Let WebSocket upgrades through (`upgrade_configs` on the front's connection manager), as
    /// an ingress in front of WebSocket services does.
    pub websocket: bool,
}

/// The front's config: listener `front`, cluster `gateways` (stats `cluster.gateways.*`).
pub fn front_yaml(f: &Front) -> String {
    let admin = f.admin;
    let upgrades = if f.websocket {
        "          upgrade_configs: [{ upgrade_type: websocket }]\n"
    } else {
        ""
    };
    let listener = match f.listen {
        None => String::new(),
        Some(listen) => format!(
            r#"  listeners:
  - name: front
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {listen} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: front
          codec_type: AUTO
{upgrades}          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                route: {{ cluster: gateways, timeout: {} }}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
"#,
            f.route_timeout
        ),
    };
    let h2 = if f.upstream_h2 {
        r#"    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: { http2_protocol_options: {} }
"#
    } else {
        ""
    };
    let hc = match f.health_check {
        None => String::new(),
        Some((path, interval)) => format!(
            r#"    common_lb_config: {{ healthy_panic_threshold: {{ value: 0 }} }}
    health_checks:
    - timeout: 1s
      interval: {interval}
      no_traffic_interval: {interval}
      unhealthy_threshold: 1
      healthy_threshold: 1
      http_health_check: {{ path: "{path}" }}
"#
        ),
    };
    let endpoints: String = f
        .gateways
        .iter()
        .map(|(port, hc_port)| {
            format!(
                "        - endpoint:\n            address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}\n            health_check_config: {{ port_value: {hc_port} }}\n"
            )
        })
        .collect();
    format!(
        r#"admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin} }} }}
static_resources:
{listener}  clusters:
  - name: gateways
    type: STATIC
    connect_timeout: 1s
    lb_policy: ROUND_ROBIN
{h2}{hc}    load_assignment:
      cluster_name: gateways
      endpoints:
      - lb_endpoints:
{endpoints}"#
    )
}
