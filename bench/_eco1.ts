import { runEconomicBench } from './economic.js';
await runEconomicBench({ durationS: 4, port: 18510, workers: Number(process.env.W ?? 1) });
