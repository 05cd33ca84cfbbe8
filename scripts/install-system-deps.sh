#!/usr/bin/env bash
# Installs the Debian packages the test suite starts for real (ZooKeeper, Java for Spark, Chromium). Idempotent; needs root (or sudo) when missing.
set -euo pipefail
need=()
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
[ -x /usr/bin/chromium ] || need+=(chromium)  # the console's browser test (driven by Playwright)
[ ${#need[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "installing Debian packages: ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
