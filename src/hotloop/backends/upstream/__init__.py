"""Models that another engine serves over HTTP: the pooled client, replica routing and each engine API."""
