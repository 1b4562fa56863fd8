#!/bin/sh
# Renders include/config/alertmanager.yml for the alertmanager service (docker-compose.yaml):
# fills its placeholders from the environment and writes the two secrets to files in
# SECRETS_DIR (a tmpfs in compose), mode 600, which the config names. Busybox sh and sed
# only: the prom/alertmanager image has nothing else.
#   alertmanager-render.sh TEMPLATE OUTPUT [SECRETS_DIR]
set -eu
template=$1
output=$2
secrets=${3:-/run/kb-alertmanager}
: "${SMTP_HOST:?}" "${SMTP_PORT:?}" "${SMTP_USER:?}" "${SMTP_PASSWORD:?}" "${ALERT_FROM:?}"
: "${ALERT_EMAIL_TO:?}" "${ALERT_WEBHOOK_BASE:?}" "${ALERT_WEBHOOK_PATH:?}"
umask 077
mkdir -p "$secrets"
printf '%s' "$SMTP_PASSWORD" > "$secrets/smtp_password"
printf '%s/%s' "${ALERT_WEBHOOK_BASE%/}" "${ALERT_WEBHOOK_PATH#/}" > "$secrets/webhook_url"
# ALERT_EMAIL_TO is a JSON list of addresses; Alertmanager takes them comma-separated.
to=$(printf '%s' "$ALERT_EMAIL_TO" | sed -e 's/[][" ]//g')
# '|' cannot appear in a host, a port, a user name or an address: it is the sed delimiter.
sed -e "s|\${SMTP_HOST}|$SMTP_HOST|g" -e "s|\${SMTP_PORT}|$SMTP_PORT|g" -e "s|\${SMTP_USER}|$SMTP_USER|g" \
    -e "s|\${ALERT_FROM}|$ALERT_FROM|g" -e "s|\${ALERT_EMAIL_TO}|$to|g" \
    -e "s|/run/kb-alertmanager/|$secrets/|g" "$template" > "$output"
if grep -q '\${' "$output"; then
    echo "alertmanager-render.sh: a value was left unfilled in $output" >&2
    exit 1
fi
