#!/bin/sh
# One-shot, idempotent (docker-compose.yaml's `minio-init`, from the minio/mc image): the
# buckets, and one MinIO user per service with a policy of its own, so that only this
# container and MinIO itself ever hold the root credentials.
#
#   user                   policy (this folder)   may
#   AIRFLOW_S3_ACCESS_KEY  kb-pipeline            list and read versions of `inbox` and remove old ones (retention); list, read, write and delete `kb-artifacts`
#   OCR_S3_ACCESS_KEY      kb-ocr-read            read objects of `inbox` (and versions), nothing else
#   SEARCH_S3_ACCESS_KEY   kb-search-read         read versions of objects of `inbox` (page images), nothing else
#   EXPORTER_S3_ACCESS_KEY kb-exporter-read       list `inbox`'s versions, list and read `kb-artifacts` (run summaries)
#
# Each policy is what its service asks of S3, no more: tests/integration/test_s3_policies.py
# records the requests of each service's own code and holds the policy to them.
#
# Re-running it sets each user's secret key again (a rotation) and re-applies the policies.
# Whoever uploads documents needs a user of their own that may write `inbox` (docs/DEPLOY.md).
set -eu

: "${MINIO_ROOT_USER:?}" "${MINIO_ROOT_PASSWORD:?}"
: "${AIRFLOW_S3_ACCESS_KEY:?}" "${AIRFLOW_S3_SECRET_KEY:?}"
: "${OCR_S3_ACCESS_KEY:?}" "${OCR_S3_SECRET_KEY:?}"
: "${SEARCH_S3_ACCESS_KEY:?}" "${SEARCH_S3_SECRET_KEY:?}"
: "${EXPORTER_S3_ACCESS_KEY:?}" "${EXPORTER_S3_SECRET_KEY:?}"
here="${0%/*}"  # this folder, mounted read-only (no dirname in the mc image needed)

mc alias set kb http://minio:9000 "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" >/dev/null
# inbox keeps versions, so every run reads exactly the version it planned
mc mb --ignore-existing kb/inbox kb/kb-artifacts
mc version enable kb/inbox

# service_user <what> <access key> <secret key> <policy>
service_user() {
    mc admin policy create kb "$4" "$here/$4.json" >/dev/null
    mc admin user add kb "$2" "$3" >/dev/null
    # attaching a policy that is already attached is an error for mc: check the end state instead
    mc admin policy attach kb "$4" --user "$2" >/dev/null 2>&1 || true
    case "$(mc admin user info kb "$2")" in
        *"$4"*) echo "minio-init: the $1 user has policy $4" ;;
        *) echo "minio-init: could not attach policy $4 to the $1 user" >&2; exit 1 ;;
    esac
}

service_user airflow "$AIRFLOW_S3_ACCESS_KEY" "$AIRFLOW_S3_SECRET_KEY" kb-pipeline
service_user ocr-service "$OCR_S3_ACCESS_KEY" "$OCR_S3_SECRET_KEY" kb-ocr-read
service_user search-service "$SEARCH_S3_ACCESS_KEY" "$SEARCH_S3_SECRET_KEY" kb-search-read
service_user kb-exporter "$EXPORTER_S3_ACCESS_KEY" "$EXPORTER_S3_SECRET_KEY" kb-exporter-read
