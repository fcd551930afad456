import { describe, expect, it } from 'vitest';
import { GatewayError, gatewayError } from './model.js';
import { hashDetails } from './payee-details.js';

/** The param and code a bad set of details answers. */
async function refusal(details: Record<string, unknown>, invalid = gatewayError.invalidRequest) {
  const err = await hashDetails(details as never, 'details', invalid).then(
    () => null,
    (e: unknown) => e,
  );
  if (!(err instanceof GatewayError)) throw new Error(`expected a GatewayError, got ${String(err)}`);
  return { param: err.body.param, code: err.body.code, message: err.body.message };
}

describe('hashDetails', () => {
  it('hashes and normalizes as @svc/capsules does', async () => {
    const { normalized, hash } = await hashDetails({ name: ' Zed  LTD ', wallet_address: '0xAB' }, 'details');
    expect(normalized).toEqual({ name: 'zed ltd', wallet_address: '0xab' });
    expect(hash).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it('names the member at fault: `.name` for a name the package refuses, else the details', async () => {
    for (const name of ['   ', '\t\n', '\u00a0\u3000', '', undefined, 5]) {
      expect([name, (await refusal({ name, account_number: 'DE00' })).param]).toEqual([name, 'details.name']);
    }
    for (const details of [{ name: 'Acme' }, { name: 'Acme', account_number: ' - ', wallet_address: '  ' }]) {
      const r = await refusal(details);
      expect([details, r.param]).toEqual([details, 'details']);
      expect(r.message).toContain('account_number or a wallet_address');
    }
    // Without a name nor an account, the name is named first (as the package checks it first).
    expect((await refusal({ name: ' ' })).param).toBe('details.name');
  });

  it('answers with the error it is given (capsule_payload_invalid on consume)', async () => {
    const r = await refusal({ name: ' ', account_number: '1' }, gatewayError.payloadInvalid);
    expect(r).toMatchObject({ code: 'capsule_payload_invalid', param: 'details.name' });
    expect(r.message).toBe('details.name: beneficiary name is required');
  });
});
