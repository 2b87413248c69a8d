package lockbroker

import "context"

// ForceRelease ends a stuck lease of tenant's lock key (the client must use
// the admin token: New(url, adminToken) or WithAPIKey). The release is in
// the lock's history; a queued waiter gets the lock at once; the next grant
// gets a new token. ErrNotFound when nobody holds it or the tenant is
// unknown.
func (c *Client) ForceRelease(ctx context.Context, tenant, key string) (*ForceReleased, error) {
	var out ForceReleased
	path := "/v1/admin/tenants/" + segment(tenant) + "/locks/" + segment(key) + "/release"
	if err := c.post(ctx, path, nil, releasing, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
