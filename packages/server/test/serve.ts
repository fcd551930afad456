import type { Config } from '../src/config.js';
import { signUserToken } from '../src/lib/jwt.js';
import type { RunningServer } from '../src/server.js';
import { JWT_SECRET } from './helpers.js';

/**
 * One organization with a project on a server started in this process (`startServer`): a user
 * token of its owner, and the project's API key.
 */
export async function organizationWithProject(
  server: RunningServer,
  config: Config,
): Promise<{ token: string; apiKey: string }> {
  const token = await signUserToken(JWT_SECRET, 'stopper', 600, config);
  const auth = { authorization: `Bearer ${token}` };
  const org = await server.app.inject({
    method: 'POST',
    url: '/v1/organizations',
    headers: auth,
    payload: { name: 'S', slug: 'stop-org' },
  });
  const project = await server.app.inject({
    method: 'POST',
    url: '/v1/projects',
    headers: auth,
    payload: { organizationId: org.json()._id, name: 'p' },
  });
  return { token, apiKey: project.json().apiKey as string };
}
