/** SPEC section 8: regex constraints are at most 256 characters. */
export const MAX_REGEX_LENGTH = 256;
