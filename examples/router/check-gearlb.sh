#!/bin/sh
# keepalived's vrrp_script for a gearlb router (examples/router/README.md): succeeds
# while the router on this host answers 200 on /health of its status listener, which
# it does while it is connected to a broker or its routing table is younger than
# routing_spi.max_table_age (docs/router.md). Anything else fails: a 503, a refused or
# silent port, a check that takes too long.
#
#   check-gearlb.sh [URL]     default http://127.0.0.1:8081/health (listen.status)
#
# POSIX sh (keepalived runs it as its script_user, without a login shell); curl, else
# wget. Nothing is printed: keepalived logs the transitions.

PATH=/usr/local/bin:/usr/bin:/bin
export PATH
# The router is local: no proxy, ever.
unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY all_proxy ALL_PROXY

url=${1:-http://127.0.0.1:8081/health}
# Seconds for the whole check, connection included: under vrrp_script's `timeout`
# (1 s), so that a slow answer is a failure this script reports, not one keepalived
# has to kill.
limit=0.8

if command -v curl >/dev/null 2>&1; then
  exec curl --silent --fail --output /dev/null --max-time "$limit" \
    --connect-timeout "$limit" --noproxy '*' -- "$url"
elif command -v wget >/dev/null 2>&1; then
  # wget takes whole seconds; a 503 is an error exit.
  exec wget -q -O /dev/null -T 1 -t 1 -- "$url"
fi
echo "check-gearlb.sh: neither curl nor wget is installed" >&2
exit 1
