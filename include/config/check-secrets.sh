#!/usr/bin/env bash
# Refuses to start the deployment while a secret is empty, still an example placeholder
# (`change-me-...` from .env.example), too short, unusable in the URL it goes into, or the
# same as another (two identities with one key are one identity).
#
# docker-compose.yaml runs this as the one-shot service `secrets-check`, and every other
# service waits for it to complete successfully. It owns the rule, rather than each service's
# settings, because half of the secrets belong to images we do not build (Postgres, MinIO,
# Redis, Qdrant, Grafana), and compose's own `${VAR:?}` only refuses an empty value.
#
# It checks every variable it is given: compose passes it each secret of `.env`. Messages
# name the variable, never its value.
set -euo pipefail

MIN_LENGTH=16
problems=()

for name in $(compgen -e); do
    value="${!name}"
    lowered="${value,,}"
    if [[ "$lowered" == *change-me* || "$lowered" == *changeme* ]]; then
        problems+=("$name still holds the example placeholder from .env.example")
        continue
    fi
    case "$name" in
        *PASSWORD*|*SECRET*|*API_KEY*|*ACCESS_KEY*|*WEBHOOK_PATH*) ;;
        *) continue ;;
    esac
    if [[ -z "$value" ]]; then
        problems+=("$name is empty")
        continue
    fi
    case "$name" in
        # chosen by the mail provider, not by us; access keys are identifiers, not secrets
        SMTP_PASSWORD|*ACCESS_KEY*|*WEBHOOK_PATH*) ;;
        *) if (( ${#value} < MIN_LENGTH )); then
               problems+=("$name is shorter than $MIN_LENGTH characters")
           fi ;;
    esac
    case "$name" in
        # these go into a connection URL (postgresql://role:PASSWORD@..., redis://:PASSWORD@...)
        POSTGRES_PASSWORD|*DB_PASSWORD|REDIS_PASSWORD)
            if [[ ! "$value" =~ ^[A-Za-z0-9._~-]+$ ]]; then
                problems+=("$name has characters a URL cannot hold as they are (use letters, digits, '-', '_', '.', '~')")
            fi ;;
    esac
done

# Two identities must not share a key: MinIO would take the second user for the first (one
# identity, both policies), and a password shared between roles lets each act as the other.
# Compared two by two; only the names are printed.
names=()
for name in $(compgen -e); do
    case "$name" in
        *PASSWORD*|*SECRET*|*API_KEY*|*ACCESS_KEY*|MINIO_ROOT_USER) [[ -n "${!name}" ]] && names+=("$name") ;;
    esac
done
for ((i = 0; i < ${#names[@]}; i++)); do
    for ((j = i + 1; j < ${#names[@]}; j++)); do
        if [[ "${!names[i]}" == "${!names[j]}" ]]; then
            problems+=("${names[i]} and ${names[j]} are the same; every identity needs its own")
        fi
    done
done

if (( ${#problems[@]} )); then
    printf 'secrets-check: refusing to start; set these in .env (see .env.example):\n' >&2
    printf '  - %s\n' "${problems[@]}" >&2
    exit 1
fi
echo "secrets-check: every secret is set"
