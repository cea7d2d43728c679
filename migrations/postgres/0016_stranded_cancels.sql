-- Operations stranded by a cancel: until this release, a cancel requested while an
-- operation ran, followed by the lease holder putting it back in the queue before its job
-- saw the request (a transient failure's retry, a shutdown's or a pause's release, a rate
-- limit's deferral), left it `queued` with the request set. Claims never take such a row,
-- so it stayed queued — and a delete's barrier refused appends to its conversation — until
-- someone cancelled it again. The lease holder now ends it `cancelled` instead
-- (`transitions::apply`); this ends those left behind the same way, releasing their
-- barriers. No other path leaves a queued row with the request set.
UPDATE conversations c SET deleting_operation = NULL
  FROM operations o
 WHERE o.state = 'queued' AND o.cancel_requested = 1
   AND c.tenant = o.tenant AND c.deleting_operation = o.id;

UPDATE operations
   SET state = 'cancelled', phase = 'cancelled', pushed_at_ms = NULL,
       finished_at_ms = (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
       updated_at_ms = (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
       version = version + 1
 WHERE state = 'queued' AND cancel_requested = 1;
