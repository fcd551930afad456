export { buildApp } from './app.js';
export { type Config, loadConfig } from './config.js';
export { startServer } from './server.js';
export { openStore, type Store } from './storage/db.js';
export { migrateToLatest } from './storage/migrate.js';
