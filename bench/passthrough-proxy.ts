/**
 * The gateway bench's floor: a bare node:http reverse proxy that passes every request to UPSTREAM
 * (method, path, headers and body) and streams the answer back (JSON or SSE) as it comes. It adds
 * the hop a gateway cannot avoid (one more process, one more HTTP request each way) and nothing
 * else: no authentication, no policy, no record. GET /readyz answers 200 for the bench's start-up.
 * Run: PORT=… UPSTREAM=http://127.0.0.1:…/ node --import tsx bench/passthrough-proxy.ts
 */
import { Agent, createServer, request } from 'node:http';

const port = Number(process.env.PORT ?? 0);
const upstream = new URL(process.env.UPSTREAM ?? 'http://127.0.0.1:3001/');
const agent = new Agent({ keepAlive: true });

const server = createServer((req, res) => {
  if (req.url === '/readyz') {
    res.writeHead(200).end('ok');
    return;
  }
  const headers = { ...req.headers, host: upstream.host };
  let answered = false;
  const out = request(
    { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers, agent },
    (answer) => {
      // An answer cut off (the client left, the upstream closed) just ends here.
      answer.on('error', () => res.destroy());
      answer.on('end', () => {
        answered = true;
      });
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    },
  );
  out.on('error', () => {
    if (!res.headersSent) res.writeHead(502);
    res.end();
  });
  // A client that goes away before the answer ended (a GET stream it closes) ends the upstream
  // request too; a finished one keeps its connection for the next request.
  res.on('close', () => {
    if (!answered) out.destroy();
  });
  req.on('error', () => out.destroy());
  req.pipe(out);
});
server.listen(port, '127.0.0.1');
