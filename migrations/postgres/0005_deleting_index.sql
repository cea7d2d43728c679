-- Every terminal operation releases the conversation it may hold for deletion
-- (`deleting_operation = id`). Without an index that statement scanned all of the tenant's
-- conversations on every finish; almost every row is NULL, so the partial index is tiny.
CREATE INDEX conversations_deleting ON conversations (tenant, deleting_operation)
    WHERE deleting_operation IS NOT NULL;
