-- A subscriber's deliveries log (issue 31, the subscriber portal) filtered by status: each of its
-- endpoints' deliveries of one status, newest first. Without it a rare status (the dead letters a
-- subscriber looks for) is read through the status index, whose rows of that status are every
-- subscriber's, or through the endpoint index, which holds every status of the endpoint.
CREATE INDEX kurir_deliveries_endpoint_status ON kurir_deliveries (endpoint_id, status, id DESC);
