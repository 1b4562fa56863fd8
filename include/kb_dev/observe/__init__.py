"""The dashboards as code and their PNG stand-in: they write the Grafana JSON that compose provisions
and draw panels from a Prometheus, and nothing a service or a worker runs imports them."""
